#include "sift/prefix_cache.h"

#include <algorithm>
#include <utility>

namespace sift {
namespace {

int64_t CommonPrefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

std::string PrefixCachePlugin(const std::string& scope) { return scope.substr(0, scope.find('@')); }

PrefixCache::PrefixCache(Options options, Budget budget)
    : options_(options), budget_(std::move(budget)) {}

PrefixCache::~PrefixCache() { Clear(); }

std::optional<PrefixCache::Hit> PrefixCache::Lookup(const std::string& scope,
                                                    const std::vector<TokenId>& tokens,
                                                    int64_t max_tokens, int64_t extra) {
  std::shared_ptr<const Entry> best;
  int64_t best_len = 0;
  {
    MutexLock lock(mu_);
    EntryList::iterator best_it = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if ((*it)->scope != scope) continue;
      const int64_t len = std::min(CommonPrefix((*it)->tokens, tokens), max_tokens);
      if (len > best_len) {
        best_len = len;
        best_it = it;
      }
    }
    if (best_it == entries_.end() || best_len < options_.min_tokens) {
      ++stats_.misses;
      return std::nullopt;
    }
    best = *best_it;
    entries_.splice(entries_.begin(), entries_, best_it);  // most recently used
    ++stats_.hits;
    stats_.reused_tokens += best_len;
  }
  const int64_t rest = static_cast<int64_t>(tokens.size()) - best_len;
  return Hit{best->cache.ClonePrefix(best_len, rest + extra), best_len};
}

bool PrefixCache::Insert(const std::string& scope, const std::vector<TokenId>& tokens,
                         const KvCache& cache) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < options_.min_tokens) return false;
  const int64_t bytes = n * cache.num_layers() * KvCache::EntryBytes(cache.shape());
  {
    MutexLock lock(mu_);
    for (const auto& e : entries_) {
      if (e->scope == scope && CommonPrefix(e->tokens, tokens) == n) return false;  // covered
    }
    if (!Charge(bytes)) {
      ++stats_.skipped;
      return false;
    }
  }
  auto entry = std::make_shared<Entry>(Entry{scope, tokens, KvCache(cache.shape()), bytes});
  try {
    entry->cache = cache.ClonePrefix(n, 0);
  } catch (...) {
    if (budget_.release) budget_.release(bytes);
    throw;
  }
  MutexLock lock(mu_);
  const std::string plugin = PrefixCachePlugin(scope);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = **it;
    const bool other_generation = e.scope != scope && PrefixCachePlugin(e.scope) == plugin;
    const bool superseded = e.scope == scope && 2 * CommonPrefix(e.tokens, tokens) >=
                                                    static_cast<int64_t>(e.tokens.size());
    it = (other_generation || superseded) ? Drop(it) : std::next(it);
  }
  entries_.push_front(std::move(entry));
  ++stats_.inserts;
  ++stats_.entries;
  stats_.bytes += bytes;
  return true;
}

bool PrefixCache::Charge(int64_t bytes) {
  for (;;) {
    const bool own_limit_ok = options_.max_bytes <= 0 || stats_.bytes + bytes <= options_.max_bytes;
    if (own_limit_ok && (!budget_.try_charge || budget_.try_charge(bytes))) return true;
    if (entries_.empty()) return false;
    Drop(std::prev(entries_.end()));
    ++stats_.evictions;
  }
}

PrefixCache::EntryList::iterator PrefixCache::Drop(EntryList::iterator it) {
  const int64_t bytes = (*it)->bytes;
  if (budget_.release) budget_.release(bytes);
  stats_.bytes -= bytes;
  --stats_.entries;
  return entries_.erase(it);
}

int64_t PrefixCache::Reclaim(int64_t bytes) {
  MutexLock lock(mu_);
  int64_t released = 0;
  while (released < bytes && !entries_.empty()) {
    released += (*std::prev(entries_.end()))->bytes;
    Drop(std::prev(entries_.end()));
    ++stats_.evictions;
  }
  return released;
}

void PrefixCache::Clear() {
  MutexLock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) it = Drop(it);
}

PrefixCache::Stats PrefixCache::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

}  // namespace sift
