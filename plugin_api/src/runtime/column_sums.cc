#include "column_sums.h"

#include "sift/error.h"

namespace sift {

at::Tensor ColumnSumsFromLse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
                             double scale, const CausalLse& lse_of) {
  SIFT_CHECK(q.dim() == 4 && k.dim() == 3 && lse.dim() == 3 && k.size(0) == q.size(0) &&
                 k.size(1) == q.size(2) && k.size(2) == q.size(3) &&
                 lse.sizes() == q.sizes().slice(0, 3),
             "ColumnSumsFromLse: expected q [Hkv, group, n, hd], k [Hkv, n, hd] and lse [Hkv, "
             "group, n]; got q ",
             q.sizes(), ", k ", k.sizes(), ", lse ", lse.sizes());
  constexpr int64_t kParts = 3;
  const int64_t hkv = q.size(0), group = q.size(1), n = q.size(2), hd = q.size(3);
  const int64_t width = hd + kColumnSumExtraDims;
  const at::ScalarType dtype = q.scalar_type();
  // The former keys, reversed: the new queries, with ones where the new keys hold -L / s.
  at::Tensor keys_as_queries = at::zeros({hkv, 1, n, width}, q.options());
  keys_as_queries.narrow(3, 0, hd).copy_(k.flip({1}).unsqueeze(1));
  keys_as_queries.narrow(3, hd, kParts).fill_(1);
  // The former queries, reversed: the new keys, with -L / s in three parts of q's dtype.
  at::Tensor queries_as_keys = at::zeros({hkv, group, n, width}, q.options());
  queries_as_keys.narrow(3, 0, hd).copy_(q.flip({2}));
  at::Tensor rest = lse.flip({2}).to(at::kFloat).mul(-1.0 / scale);
  for (int64_t p = 0; p < kParts; ++p) {
    const at::Tensor part = rest.to(dtype);
    queries_as_keys.select(3, hd + p).copy_(part);
    if (p + 1 < kParts) rest = rest - part.to(at::kFloat);
  }
  const at::Tensor swapped =
      lse_of(keys_as_queries.expand({hkv, group, n, width}), queries_as_keys, scale);
  return swapped.narrow(2, 0, n).flip({2}).exp().reshape({hkv * group, n});
}

}  // namespace sift
