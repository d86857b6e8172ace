// The attention of one decode step over a batch of requests (Model::DecodeStep), each against
// its own cache: the batch's varlen attention. Runtime-internal.
//
// THREADING: one parallel region of the CPU kernel for the whole batch (LibTorch's intra-op pool).
// ERRORS:    sift::Error on mismatched shapes or a query that sees no key.
#ifndef SIFT_RUNTIME_DECODE_ATTENTION_H_
#define SIFT_RUNTIME_DECODE_ATTENTION_H_

#include <ATen/ATen.h>

#include <vector>

#include "sift/attention.h"
#include "sift/kv_cache.h"

namespace sift {

// Row i of q ([n, hq, hd], one query per request) at positions[i] against caches[i]'s keys and
// values of `layer`, whatever each cache's length. Returns [n, hq, hd]. When every row can take
// the CPU kernel (CPU caches of one dtype, a supported head dim) they run in one call of it;
// otherwise each row calls sift::Attention. The caches already hold this step's keys. With
// `out` (a contiguous tensor shaped and typed like q, on q's device) the result is written there
// and `out` is returned.
at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& positions,
                           const std::vector<KvCache*>& caches, int64_t layer,
                           const AttentionOptions& options, at::Tensor* out = nullptr);

}  // namespace sift

#endif  // SIFT_RUNTIME_DECODE_ATTENTION_H_
