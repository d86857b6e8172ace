// Which x86 instruction-set level the CPU kernels run at: detected once per process from the
// CPU's capabilities; SIFT_CPU_ISA=generic|avx2|avx512 in the environment forces a level
// (lower than the CPU's, for tests and benchmarks; a higher one is refused and ignored).
#ifndef SIFT_RUNTIME_CPU_ISA_H_
#define SIFT_RUNTIME_CPU_ISA_H_

namespace sift::cpu {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

Isa CpuIsa();
const char* IsaName(Isa isa);

}  // namespace sift::cpu

#endif  // SIFT_RUNTIME_CPU_ISA_H_
