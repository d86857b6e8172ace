// A bounded, thread-safe cache from a pre-tokenizer piece (its bytes) to the ids BPE gives it.
// Ordinary text repeats most of its words, so most pieces skip the merge loop.
//
// Sharded by hash, one mutex per shard; a shard that reaches its capacity is emptied (crude,
// but it keeps memory bounded and the hot words come back at once).
//
// THREADING: Lookup and Insert are safe from many threads.
// ERRORS:    none.
#ifndef SIFT_BASE_PIECE_CACHE_H_
#define SIFT_BASE_PIECE_CACHE_H_

#include <array>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sift/tokenizer.h"

namespace sift {

class PieceCache {
 public:
  // Pieces longer than this are never cached.
  static constexpr size_t kMaxPieceBytes = 48;

  // Appends the cached ids of `piece` to *out and returns true, or returns false.
  bool Lookup(std::string_view piece, std::vector<TokenId>* out) const;
  // Remembers ids[begin, end) as the encoding of `piece`.
  void Insert(std::string_view piece, const TokenId* begin, const TokenId* end);

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>> map;
  };
  Shard& ShardFor(std::string_view piece) const {
    return shards_[std::hash<std::string_view>()(piece) % kShards];
  }
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace sift

#endif  // SIFT_BASE_PIECE_CACHE_H_
