// Token sampling from logits: greedy, temperature, top-k, top-p, seeded.
//
// THREADING: a Sampler holds its RNG; one per request.
#ifndef SIFT_SAMPLER_H_
#define SIFT_SAMPLER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <random>

#include "sift/tokenizer.h"

namespace sift {

struct SamplingOptions {
  double temperature = 0.0;  // 0 = greedy (argmax; ties -> lowest id)
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off; keeps the smallest prefix of sorted probs reaching top_p
  uint64_t seed = 0;         // RNG seed; the same seed and logits give the same tokens
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  // logits: [vocab] (any float dtype). Throws sift::Error for invalid options.
  TokenId Sample(const at::Tensor& logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace sift

#endif  // SIFT_SAMPLER_H_
