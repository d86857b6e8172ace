// CPU capability detection for the quantised kernels, and the $SIFT_CPU_ISA cap.
#include <cstdlib>
#include <string>

#include "kernels.h"
#include "sift/error.h"
#include "sift/quantized_matrix.h"

namespace sift {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

CpuIsa ParseCpuIsa(const std::string& name) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  throw Error(detail::Concat("unknown CPU kernel level '", name, "' (scalar, avx2, avx512)"));
}

CpuIsa DetectedCpuIsa() {
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers (XCR0).
  static const CpuIsa detected = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return avx512 ? CpuIsa::kAvx512 : avx2 ? CpuIsa::kAvx2 : CpuIsa::kScalar;
  }();
  return detected;
}

CpuIsa DefaultCpuIsa() {
  static const CpuIsa chosen = [] {
    const char* env = std::getenv("SIFT_CPU_ISA");
    if (env == nullptr || *env == '\0') return DetectedCpuIsa();
    const CpuIsa cap = ParseCpuIsa(env);
    SIFT_CHECK(cap <= DetectedCpuIsa(), "SIFT_CPU_ISA=", env, " but this CPU supports up to ",
               CpuIsaName(DetectedCpuIsa()));
    return cap;
  }();
  return chosen;
}

namespace quant {

bool CpuHasAvx512Vnni() {
  static const bool has =
      DetectedCpuIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  return has;
}

}  // namespace quant
}  // namespace sift
