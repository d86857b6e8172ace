#include "special_tokens.h"

#include <algorithm>

namespace sift {

SpecialTokenMatcher::SpecialTokenMatcher(
    const std::vector<std::pair<std::string_view, TokenId>>& tokens)
    : nodes_(1) {
  for (const auto& [text, id] : tokens) {
    if (text.empty()) continue;
    int32_t node = 0;
    for (const char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t next = Child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& children = nodes_[node].children;
        children.insert(
            std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0})),
            {byte, next});
      }
      node = next;
    }
    if (nodes_[node].id < 0) nodes_[node].id = id;
    first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
}

int32_t SpecialTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  const auto it =
      std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0}));
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

TokenId SpecialTokenMatcher::LongestMatchAt(std::string_view text, size_t pos,
                                            size_t* length) const {
  TokenId best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].id >= 0) {
      best = nodes_[node].id;
      *length = i + 1 - pos;
    }
  }
  return best;
}

}  // namespace sift
