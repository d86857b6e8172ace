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

// A deep copy of every layer's live entries with storage for `headroom` more.
KvCache CopyWithHeadroom(const KvCache& from, int64_t headroom) {
  KvCache copy(from.shape());
  copy.set_headroom(std::max<int64_t>(0, headroom));
  for (int64_t l = 0; l < copy.num_layers(); ++l) {
    if (from.size(l) > 0) copy.Set(l, from.Keys(l), from.Values(l), from.Positions(l));
  }
  return copy;
}

}  // namespace

std::string PrefixCachePlugin(const std::string& scope) { return scope.substr(0, scope.find('@')); }
std::string PrefixCacheGeneration(const std::string& scope) {
  return scope.substr(0, scope.find('/'));
}

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
      if ((*it)->scope != scope || (*it)->state) continue;
      const int64_t len = std::min(CommonPrefix((*it)->tokens, tokens), max_tokens);
      if (len > best_len) {
        best_len = len;
        best_it = it;
      }
    }
    best = TakeHit(best_it, best_len);
    if (best == nullptr) return std::nullopt;
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
      if (e->scope == scope && !e->state && CommonPrefix(e->tokens, tokens) == n) {
        return false;  // covered
      }
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
  DropReplaced(scope, tokens, /*state=*/false, /*supersede=*/true);
  Add(std::move(entry));
  return true;
}

std::optional<PrefixCache::Hit> PrefixCache::LookupState(const std::string& scope,
                                                         const std::vector<TokenId>& tokens,
                                                         int64_t max_tokens, int64_t extra,
                                                         int64_t least) {
  std::shared_ptr<const Entry> best;
  {
    MutexLock lock(mu_);
    EntryList::iterator best_it = entries_.end();
    int64_t best_len = 0;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const Entry& e = **it;
      const int64_t len = static_cast<int64_t>(e.tokens.size());
      if (e.scope != scope || !e.state || len > max_tokens || len < least || len <= best_len) {
        continue;
      }
      if (CommonPrefix(e.tokens, tokens) == len) {
        best_len = len;
        best_it = it;
      }
    }
    best = TakeHit(best_it, best_len);
    if (best == nullptr) return std::nullopt;
  }
  const int64_t n = static_cast<int64_t>(best->tokens.size());
  return Hit{CopyWithHeadroom(best->cache, static_cast<int64_t>(tokens.size()) - n + extra), n};
}

bool PrefixCache::InsertState(const std::string& scope, const std::vector<TokenId>& tokens,
                              const KvCache& cache, int64_t keep_prefix) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < options_.min_tokens) return false;
  const int64_t bytes = cache.Bytes();
  {
    MutexLock lock(mu_);
    for (const auto& e : entries_) {
      if (e->scope == scope && e->state && e->tokens == tokens) return false;  // held already
    }
    if (!Charge(bytes)) {
      ++stats_.skipped;
      return false;
    }
  }
  auto entry = std::make_shared<Entry>(Entry{scope, tokens, KvCache(cache.shape()), bytes, true});
  try {
    entry->cache = CopyWithHeadroom(cache, 0);
  } catch (...) {
    if (budget_.release) budget_.release(bytes);
    throw;
  }
  MutexLock lock(mu_);
  DropReplaced(scope, tokens, /*state=*/true, keep_prefix >= 0, keep_prefix);
  Add(std::move(entry));
  return true;
}

std::shared_ptr<const PrefixCache::Entry> PrefixCache::TakeHit(EntryList::iterator it,
                                                               int64_t tokens) {
  if (it == entries_.end() || tokens < options_.min_tokens) {
    ++stats_.misses;
    return nullptr;
  }
  entries_.splice(entries_.begin(), entries_, it);  // most recently used
  ++stats_.hits;
  stats_.reused_tokens += tokens;
  return *it;
}

void PrefixCache::DropReplaced(const std::string& scope, const std::vector<TokenId>& tokens,
                               bool state, bool supersede, int64_t keep) {
  const std::string plugin = PrefixCachePlugin(scope);
  const std::string generation = PrefixCacheGeneration(scope);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = **it;
    const bool other_generation =
        PrefixCacheGeneration(e.scope) != generation && PrefixCachePlugin(e.scope) == plugin;
    const int64_t len = static_cast<int64_t>(e.tokens.size());
    const int64_t common = CommonPrefix(e.tokens, tokens);
    const bool kept = len == keep && common == len;
    const bool superseded =
        supersede && e.scope == scope && e.state == state && 2 * common >= len && !kept;
    it = (other_generation || superseded) ? Drop(it) : std::next(it);
  }
}

void PrefixCache::Add(std::shared_ptr<const Entry> entry) {
  stats_.bytes += entry->bytes;
  entries_.push_front(std::move(entry));
  ++stats_.inserts;
  ++stats_.entries;
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
