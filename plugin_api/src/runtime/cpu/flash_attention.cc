#include "cpu/flash_attention.h"

#include "sift/error.h"

namespace sift::cpu {
namespace avx512bf16 {
bool RunFlashAttention(const FlashAttentionArgs& args);
bool RunFlashAttentionBatch(const FlashAttentionArgs* args, int64_t count);
}  // namespace avx512bf16
namespace avx512 {
bool RunFlashAttention(const FlashAttentionArgs& args);
bool RunFlashAttentionBatch(const FlashAttentionArgs* args, int64_t count);
}  // namespace avx512
namespace avx2 {
bool RunFlashAttention(const FlashAttentionArgs& args);
bool RunFlashAttentionBatch(const FlashAttentionArgs* args, int64_t count);
}  // namespace avx2
namespace scalar {
bool RunFlashAttention(const FlashAttentionArgs& args);
bool RunFlashAttentionBatch(const FlashAttentionArgs* args, int64_t count);
}  // namespace scalar

namespace {
bool CpuHasAvx512Bf16() {
  static const bool has =
      DetectedCpuIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  return has;
}
}  // namespace

bool FlashAttentionSupportsHeadDim(int64_t hd) { return hd == 64 || hd == 128; }

void FlashAttention(const FlashAttentionArgs& args) { FlashAttention(args, DefaultCpuIsa()); }

void FlashAttention(const FlashAttentionArgs& args, CpuIsa isa, bool bf16_dot_products) {
  SIFT_CHECK(FlashAttentionSupportsHeadDim(args.hd), "FlashAttention: head dim ", args.hd,
             " not supported");
  SIFT_CHECK(isa <= DetectedCpuIsa(), "FlashAttention: ", CpuIsaName(isa),
             " is above this CPU's level");
  bool ok = false;
  switch (isa) {
    case CpuIsa::kAvx512:
      ok = bf16_dot_products && args.kv_type == ElemType::kBF16 && CpuHasAvx512Bf16()
               ? avx512bf16::RunFlashAttention(args)
               : avx512::RunFlashAttention(args);
      break;
    case CpuIsa::kAvx2:
      ok = avx2::RunFlashAttention(args);
      break;
    case CpuIsa::kScalar:
      ok = scalar::RunFlashAttention(args);
      break;
  }
  SIFT_CHECK(ok, "Attention: a query sees no key (check the positions and the Λ mask)");
}

void FlashAttentionBatch(const FlashAttentionArgs* args, int64_t count) {
  if (count <= 0) return;
  for (int64_t s = 0; s < count; ++s) {
    SIFT_CHECK(args[s].hd == args[0].hd && args[s].kv_type == args[0].kv_type,
               "FlashAttentionBatch: sequence ", s, " has head dim ", args[s].hd, " and ",
               args[s].kv_type == ElemType::kBF16 ? "bf16" : "fp32", " keys, sequence 0 ",
               args[0].hd, " and ", args[0].kv_type == ElemType::kBF16 ? "bf16" : "fp32");
  }
  SIFT_CHECK(FlashAttentionSupportsHeadDim(args[0].hd), "FlashAttention: head dim ", args[0].hd,
             " not supported");
  bool ok = false;
  switch (DefaultCpuIsa()) {
    case CpuIsa::kAvx512:
      ok = args[0].kv_type == ElemType::kBF16 && CpuHasAvx512Bf16()
               ? avx512bf16::RunFlashAttentionBatch(args, count)
               : avx512::RunFlashAttentionBatch(args, count);
      break;
    case CpuIsa::kAvx2:
      ok = avx2::RunFlashAttentionBatch(args, count);
      break;
    case CpuIsa::kScalar:
      ok = scalar::RunFlashAttentionBatch(args, count);
      break;
  }
  SIFT_CHECK(ok, "Attention: a query sees no key (check the positions and the Λ mask)");
}

const char* FlashAttentionIsa() {
  return DefaultCpuIsa() == CpuIsa::kAvx512 && CpuHasAvx512Bf16() ? "avx512bf16"
                                                                  : CpuIsaName(DefaultCpuIsa());
}

}  // namespace sift::cpu
