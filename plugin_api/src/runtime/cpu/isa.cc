#include "cpu/isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sift::cpu {
namespace {

Isa Detect() {
  __builtin_cpu_init();
  Isa best = Isa::kGeneric;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
  if (best == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    best = Isa::kAvx512;
  }
  const char* forced = std::getenv("SIFT_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(forced, IsaName(isa)) != 0) continue;
    if (static_cast<int>(isa) <= static_cast<int>(best)) return isa;
    std::fprintf(stderr, "sift: SIFT_CPU_ISA=%s is above this CPU's %s; using %s\n", forced,
                 IsaName(best), IsaName(best));
    return best;
  }
  std::fprintf(stderr, "sift: SIFT_CPU_ISA=%s is not one of generic, avx2, avx512; using %s\n",
               forced, IsaName(best));
  return best;
}

}  // namespace

Isa CpuIsa() {
  static const Isa isa = Detect();
  return isa;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kGeneric: return "generic";
  }
  return "generic";
}

}  // namespace sift::cpu
