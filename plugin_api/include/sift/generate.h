// The decode loop: sample, stream text, stop on tokens, strings or a callback's say-so.
//
// Generate() continues from a prefilled cache: `first_logits` are the logits after the last
// prompt token and `next_position` is the RoPE position of the first generated token (the
// uncompressed prompt length, even when the cache was compressed).
//
// Stop strings never leak: text that could be the beginning of a stop string is held back until
// it is known not to be one. The returned text excludes the stop string.
//
// THREADING: runs on the caller's thread; the callback is invoked on it.
#ifndef SIFT_GENERATE_H_
#define SIFT_GENERATE_H_

#include <functional>
#include <string>
#include <vector>

#include "sift/model.h"
#include "sift/sampler.h"

namespace sift {

struct GenerationOptions {
  SamplingOptions sampling;
  int64_t max_tokens = 128;
  std::vector<std::string> stop_strings;
  std::vector<TokenId> stop_tokens;  // in addition to the model's end-of-generation tokens
  bool ignore_eog = false;           // keep going past EOS (benchmarks)
};

enum class FinishReason { kLength, kStop, kCancelled, kContextFull };
const char* FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated ids (a stop token is not included)
  std::string text;
  FinishReason finish = FinishReason::kLength;
  double decode_ms = 0;  // time spent generating after the first token was sampled
};

// Called with each newly safe piece of text (possibly "") and the token that produced it.
// Return false to cancel.
using StreamCallback = std::function<bool(const std::string& piece, TokenId token)>;

GenerationResult Generate(const Model& model, KvCache& cache, const at::Tensor& first_logits,
                          int64_t next_position, const GenerationOptions& options,
                          const StreamCallback& on_piece = nullptr);

}  // namespace sift

#endif  // SIFT_GENERATE_H_
