// PrefixCache: the full KV of earlier prompts, kept across requests so that a prompt starting
// with one of them prefills only the rest (automatic prefix reuse, as llama-server's
// cache_prompt and vLLM's prefix caching do).
//
// An entry is the uncompressed KV of a token sequence prefilled from position 0, filed under a
// scope: the producing stage's plugin, version and file hash, so that another stage's entries,
// or those of an older generation of a hot-reloaded plugin, are never served. Lookup finds the
// entry with the longest common token prefix in the scope and returns a deep copy of that many
// entries, which the request owns and extends; entries themselves are never written. Insert
// stores a deep copy and drops every entry of the same plugin made by another generation, and
// every entry of its scope that the new one shares at least half of (the new one serves that
// prefix: one entry per document or conversation, not one per question).
//
// A *state* entry (InsertState / LookupState) is instead what a stage holds after a token
// sequence when that is not the sequence's full KV, e.g. a streaming prefill's sink and window
// entries: it cannot be cut to a shorter prefix, so it serves only prompts that start with all of
// its tokens, and is copied whole.
//
// A scope may carry a variant after the generation ("prefill_partial@1.0.0#<hash>/layers=16"):
// variants of one generation live side by side; another generation of the plugin drops them all.
//
// Memory: each entry's bytes are charged to a budget through `Budget` (siftd: its KvBudget, so
// the cache never takes the daemon past --kv-budget). An entry is stored only if its bytes can
// be charged at once, after evicting least-recently-used entries; Reclaim() evicts for a request
// that waits for budget, so cached prompts never keep a request out.
//
// THREADING: every method is safe from any thread. The copies are made outside the lock (an
//            entry being copied stays alive through its shared_ptr; its bytes may already be
//            released to the budget while the copy finishes).
// ERRORS:    Lookup and Insert throw what LibTorch throws when a copy cannot be allocated (an
//            Insert that throws stores nothing and charges nothing); nothing else throws.
#ifndef SIFT_PREFIX_CACHE_H_
#define SIFT_PREFIX_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sift/kv_cache.h"
#include "sift/thread_annotations.h"
#include "sift/tokenizer.h"

namespace sift {

class PrefixCache {
 public:
  // Where entry bytes are charged. Unset functions: no external budget (max_bytes alone).
  struct Budget {
    std::function<bool(int64_t)> try_charge;  // takes `bytes` if they fit now; false otherwise
    std::function<void(int64_t)> release;     // gives bytes back
  };
  struct Options {
    int64_t min_tokens = 64;  // shorter prompts are not stored, shorter matches are misses
    int64_t max_bytes = 0;    // 0: no limit of the cache's own (the budget's alone)
  };
  struct Stats {
    int64_t hits = 0, misses = 0;  // lookups that reused >= min_tokens, and the others
    int64_t reused_tokens = 0;     // prompt tokens served from entries, over all hits
    int64_t inserts = 0, evictions = 0, skipped = 0;  // skipped: no budget for the entry
    int64_t entries = 0, bytes = 0;
  };
  struct Hit {
    KvCache cache;       // entries [0, tokens) of every layer, storage for the rest of the prompt
                         // and `extra` more
    int64_t tokens = 0;  // how many prompt tokens it covers
  };

  PrefixCache(Options options, Budget budget);
  ~PrefixCache();  // releases every entry's bytes
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest cached prefix of `tokens` in `scope`, at most `max_tokens` long, copied with
  // storage (and headroom) for the rest of `tokens` and `extra` more entries (a decode budget);
  // nullopt (a miss) when none reaches min_tokens.
  std::optional<Hit> Lookup(const std::string& scope, const std::vector<TokenId>& tokens,
                            int64_t max_tokens, int64_t extra);
  // Stores a copy of `cache`, the full KV of `tokens` (every layer holds tokens.size() entries in
  // prompt order), unless it is shorter than min_tokens, already covered by an entry, or its
  // bytes cannot be charged. Returns whether it was stored.
  bool Insert(const std::string& scope, const std::vector<TokenId>& tokens, const KvCache& cache);
  // State entries (see above). LookupState: the longest state entry in `scope` whose tokens all
  // begin `tokens` and that is at most `max_tokens` and at least `least` tokens long (and at
  // least Options::min_tokens; least = max_tokens: the state after exactly that prefix), a deep
  // copy of its whole cache with headroom for the rest of `tokens` and `extra` more; nullopt (a
  // miss) otherwise. InsertState stores a copy of `cache` (any entries per layer) as the state
  // after `tokens` unless that is shorter than min_tokens, the scope already holds the same tokens,
  // or its bytes cannot be charged. With `keep_prefix` >= 0 it first drops the scope's state
  // entries that share at least half of their tokens with `tokens` (as Insert does), except the
  // state after tokens[0, keep_prefix) (e.g. a document's, which other questions start from); with
  // -1 it drops none. Returns whether it stored the entry.
  std::optional<Hit> LookupState(const std::string& scope, const std::vector<TokenId>& tokens,
                                 int64_t max_tokens, int64_t extra, int64_t least = 0);
  bool InsertState(const std::string& scope, const std::vector<TokenId>& tokens,
                   const KvCache& cache, int64_t keep_prefix);
  // Evicts least-recently-used entries until `bytes` were released or none is left; returns the
  // bytes released.
  int64_t Reclaim(int64_t bytes);
  void Clear();

  Stats stats() const;

 private:
  struct Entry {
    std::string scope;
    std::vector<TokenId> tokens;
    KvCache cache;
    int64_t bytes = 0;
    bool state = false;  // a state entry: serves only prompts that start with all of `tokens`
  };
  using EntryList = std::list<std::shared_ptr<const Entry>>;  // most recently used first

  // Drops `it` and gives its bytes back; returns the next element.
  EntryList::iterator Drop(EntryList::iterator it) SIFT_REQUIRES(mu_);
  bool Charge(int64_t bytes) SIFT_REQUIRES(mu_);  // evicts LRU entries until the bytes fit
  // Drops the entries of `scope`'s plugin made by another generation, and with `supersede` the
  // entries of `scope` of the same kind that share at least half of their tokens with `tokens`,
  // except one of exactly `keep` tokens that begin `tokens` (-1: none excepted).
  void DropReplaced(const std::string& scope, const std::vector<TokenId>& tokens, bool state,
                    bool supersede, int64_t keep = -1) SIFT_REQUIRES(mu_);
  // A lookup's outcome: counts a miss (it is end() or `tokens` is short of min_tokens) and returns
  // null, or counts a hit of `tokens`, makes the entry the most recently used and returns it.
  std::shared_ptr<const Entry> TakeHit(EntryList::iterator it, int64_t tokens) SIFT_REQUIRES(mu_);
  // Files `entry` (its bytes already charged) as the most recently used.
  void Add(std::shared_ptr<const Entry> entry) SIFT_REQUIRES(mu_);

  const Options options_;
  const Budget budget_;
  mutable Mutex mu_;
  EntryList entries_ SIFT_GUARDED_BY(mu_);
  Stats stats_ SIFT_GUARDED_BY(mu_);
};

// The plugin part of a scope ("prefill_full@1.2.0#<hash>" -> "prefill_full") and its generation
// part ("prefill_partial@1.0.0#<hash>/layers=16" -> "prefill_partial@1.0.0#<hash>"): entries of
// one plugin under another generation are an older (or newer) build of it.
std::string PrefixCachePlugin(const std::string& scope);
std::string PrefixCacheGeneration(const std::string& scope);

}  // namespace sift

#endif  // SIFT_PREFIX_CACHE_H_
