#include "piece_cache.h"

namespace sift {

bool PieceCache::Lookup(std::string_view piece, std::vector<TokenId>* out) const {
  if (piece.size() > kMaxPieceBytes) return false;
  Shard& shard = ShardFor(piece);
  // A transparent lookup by string_view would avoid this copy; C++17's unordered_map has none.
  const std::string key(piece);
  std::lock_guard<std::mutex> lock(shard.mu);
  const auto it = shard.map.find(key);
  if (it == shard.map.end()) return false;
  out->insert(out->end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::Insert(std::string_view piece, const TokenId* begin, const TokenId* end) {
  if (piece.size() > kMaxPieceBytes) return;
  Shard& shard = ShardFor(piece);
  std::string key(piece);
  std::vector<TokenId> ids(begin, end);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::move(key), std::move(ids));
}

}  // namespace sift
