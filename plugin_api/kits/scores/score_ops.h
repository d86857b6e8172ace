// SDK kit sift_kit_scores (plugin_api/kits/scores), linked by the selection kit, the filter
// plugins (gemfilter, ilre), prefill_skip and tools/layer_scan.
//
// Score operations shared by the selection and filter plugins: GQA aggregation of per-query-head
// scores, 1-D pooling along the token axis, and top-k kept in original order.
//
// Every function is pure, works on CPU fp32 tensors (other float dtypes are converted) and
// throws sift::Error on misuse (wrong rank, kernel < 1, unknown names).
#ifndef SIFT_KITS_SCORES_SCORE_OPS_H_
#define SIFT_KITS_SCORES_SCORE_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace sift::plugins {

enum class PoolKind { kNone, kAvg, kMax };
enum class Reduce { kMean, kMax, kSum };

// "none" | "avg" | "max"; throws sift::Error naming `what` otherwise.
PoolKind ParsePoolKind(const std::string& name, const std::string& what = "pooling");
// "mean" | "max" | "sum".
Reduce ParseReduce(const std::string& name, const std::string& what = "aggregation");

// scores [Hq, n] per query head -> [Hkv, n]: query heads h*group .. (h+1)*group-1 belong to KV
// head h (the grouping of Llama-family GQA), reduced with `reduce`. Hq must be a multiple of Hkv.
at::Tensor AggregateGqa(const at::Tensor& scores, int64_t num_kv_heads, Reduce reduce);

// Pools along the last axis with stride 1 and the same output length: output i covers inputs
// [i - kernel/2, i - kernel/2 + kernel), i.e. centred for odd kernels and one to the left for
// even ones (the first n outputs of torch's pool1d with padding kernel/2). Average pooling
// counts padding as zeros (count_include_pad, as SnapKV / GemFilter call avg_pool1d); max
// pooling ignores padding. kernel 1 or kind kNone returns the input. Any leading shape.
at::Tensor Pool1d(const at::Tensor& scores, PoolKind kind, int64_t kernel);

// Indices of the k largest entries along the last axis, sorted ascending (original order),
// int64. k is clamped to the axis length. Ties go to the lower index.
at::Tensor TopKSorted(const at::Tensor& scores, int64_t k);

}  // namespace sift::plugins

#endif  // SIFT_KITS_SCORES_SCORE_OPS_H_
