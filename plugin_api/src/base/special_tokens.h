// Finds special-token texts inside input text: leftmost occurrence first, and at one position
// the longest text (HF tokenizers' added-token matcher, match kind LeftmostLongest).
//
// THREADING: immutable after construction; Split is safe from many threads.
// ERRORS:    none.
#ifndef SIFT_BASE_SPECIAL_TOKENS_H_
#define SIFT_BASE_SPECIAL_TOKENS_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "sift/tokenizer.h"

namespace sift {

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher() : nodes_(1) {}
  // One entry per special token; empty texts are ignored, and for a text given twice the first
  // id wins.
  explicit SpecialTokenMatcher(const std::vector<std::pair<std::string_view, TokenId>>& tokens);

  bool empty() const { return nodes_.size() <= 1; }

  // Calls on_text(fragment) for every non-empty run of ordinary text and on_token(id) for every
  // special token, in input order.
  template <typename OnText, typename OnToken>
  void Split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t done = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t length;
      const TokenId id =
          first_byte_[static_cast<uint8_t>(text[pos])] ? LongestMatchAt(text, pos, &length) : -1;
      if (id < 0) {
        ++pos;
        continue;
      }
      if (pos > done) on_text(text.substr(done, pos - done));
      on_token(id);
      pos += length;
      done = pos;
    }
    if (done < text.size()) on_text(text.substr(done));
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    TokenId id = -1;                                    // token ending here, or -1
  };

  // The id of the longest special text starting at text[pos] (its length in *length), or -1.
  TokenId LongestMatchAt(std::string_view text, size_t pos, size_t* length) const;
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::array<bool, 256> first_byte_{};
};

}  // namespace sift

#endif  // SIFT_BASE_SPECIAL_TOKENS_H_
