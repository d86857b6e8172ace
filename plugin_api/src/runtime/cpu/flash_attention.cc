#include "cpu/flash_attention.h"

#include "sift/error.h"

namespace sift::cpu {
namespace avx512bf16 {
bool RunFlashAttention(const FlashAttentionArgs& args);
}
namespace avx512 {
bool RunFlashAttention(const FlashAttentionArgs& args);
}
namespace avx2 {
bool RunFlashAttention(const FlashAttentionArgs& args);
}
namespace scalar {
bool RunFlashAttention(const FlashAttentionArgs& args);
}

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

const char* FlashAttentionIsa() {
  return DefaultCpuIsa() == CpuIsa::kAvx512 && CpuHasAvx512Bf16() ? "avx512bf16"
                                                                  : CpuIsaName(DefaultCpuIsa());
}

}  // namespace sift::cpu
