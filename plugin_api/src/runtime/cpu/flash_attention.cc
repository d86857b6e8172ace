#include "cpu/flash_attention.h"

#include "cpu/isa.h"
#include "sift/error.h"

namespace sift::cpu {
namespace avx512 {
bool RunFlashAttention(const FlashAttentionArgs& args);
}
namespace avx2 {
bool RunFlashAttention(const FlashAttentionArgs& args);
}
namespace generic {
bool RunFlashAttention(const FlashAttentionArgs& args);
}

bool FlashAttentionSupportsHeadDim(int64_t hd) { return hd == 64 || hd == 128; }

void FlashAttention(const FlashAttentionArgs& args) { FlashAttention(args, CpuIsa()); }

void FlashAttention(const FlashAttentionArgs& args, Isa isa) {
  SIFT_CHECK(FlashAttentionSupportsHeadDim(args.hd), "FlashAttention: head dim ", args.hd,
             " not supported");
  SIFT_CHECK(static_cast<int>(isa) <= static_cast<int>(CpuIsa()), "FlashAttention: ",
             IsaName(isa), " is above this CPU's level");
  bool ok = false;
  switch (isa) {
    case Isa::kAvx512: ok = avx512::RunFlashAttention(args); break;
    case Isa::kAvx2: ok = avx2::RunFlashAttention(args); break;
    case Isa::kGeneric: ok = generic::RunFlashAttention(args); break;
  }
  SIFT_CHECK(ok, "Attention: a query sees no key (check the positions and the Λ mask)");
}

const char* FlashAttentionIsa() { return IsaName(CpuIsa()); }

}  // namespace sift::cpu
