#include "sift/sampler.h"

#include "sift/error.h"

namespace sift {

TokenId Sampler::Sample(const at::Tensor& logits_in) {
  at::Tensor logits = logits_in.to(at::kCPU, at::kFloat).reshape({-1});
  SIFT_CHECK(logits.numel() > 0, "Sampler: empty logits");
  SIFT_CHECK(options_.temperature >= 0, "Sampler: temperature must be >= 0");
  SIFT_CHECK(options_.top_p > 0 && options_.top_p <= 1, "Sampler: top_p must be in (0, 1]");
  SIFT_CHECK(options_.top_k >= 0, "Sampler: top_k must be >= 0");
  if (options_.temperature == 0) return static_cast<TokenId>(logits.argmax().item<int64_t>());

  // Candidates sorted by logit, descending.
  int64_t k = logits.numel();
  if (options_.top_k > 0) k = std::min(k, options_.top_k);
  auto [values, indices] = logits.topk(k);
  at::Tensor probs = (values / options_.temperature).softmax(0);
  if (options_.top_p < 1.0) {
    at::Tensor cum = probs.cumsum(0);
    // Keep tokens whose preceding cumulative mass is < top_p (always at least one).
    int64_t keep = (cum - probs < options_.top_p).sum().item<int64_t>();
    keep = std::max<int64_t>(1, keep);
    probs = probs.slice(0, 0, keep);
    indices = indices.slice(0, 0, keep);
    probs = probs / probs.sum();
  }
  const float* p = probs.data_ptr<float>();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double r = uniform(rng_), acc = 0;
  const int64_t n = probs.numel();
  for (int64_t i = 0; i < n; ++i) {
    acc += p[i];
    if (r < acc) return static_cast<TokenId>(indices[i].item<int64_t>());
  }
  return static_cast<TokenId>(indices[n - 1].item<int64_t>());
}

}  // namespace sift
