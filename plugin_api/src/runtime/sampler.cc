#include "sift/sampler.h"

#include "sift/error.h"
#include "sift/host.h"

namespace sift {

// Everything runs where the logits are; the host reads one integer per token (the chosen id).
// The only host-side randomness is one uniform draw, so a seed reproduces the same tokens.
TokenId Sampler::Sample(const at::Tensor& logits_in) {
  SIFT_CHECK(logits_in.numel() > 0, "Sampler: empty logits");
  SIFT_CHECK(options_.temperature >= 0, "Sampler: temperature must be >= 0");
  SIFT_CHECK(options_.top_p > 0 && options_.top_p <= 1, "Sampler: top_p must be in (0, 1]");
  SIFT_CHECK(options_.top_k >= 0, "Sampler: top_k must be >= 0");
  const at::Tensor logits = logits_in.reshape({-1}).to(at::kFloat);
  if (options_.temperature == 0) return static_cast<TokenId>(HostInt(logits.argmax()));

  // Candidates sorted by logit, descending.
  int64_t k = logits.numel();
  if (options_.top_k > 0) k = std::min(k, options_.top_k);
  auto [values, indices] = logits.topk(k);
  at::Tensor probs = (values / options_.temperature).softmax(0);
  if (options_.top_p < 1.0) {
    // Keep tokens whose preceding cumulative mass is < top_p (the first always is).
    probs = probs * ((probs.cumsum(0) - probs) < options_.top_p);
  }
  // Inverse-CDF draw: the first candidate whose cumulative mass exceeds r * total.
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double r = uniform(rng_);
  const at::Tensor cdf = probs.cumsum(0);
  const at::Tensor target = cdf.narrow(0, k - 1, 1) * r;
  const at::Tensor pick =
      at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).clamp_max_(k - 1);
  return static_cast<TokenId>(HostInt(indices.index_select(0, pick)));
}

}  // namespace sift
