// AVX-512 variant with bf16 dot products (vdpbf16ps) for bf16 caches (built with -mavx512bf16 on
// top of the AVX-512 flags); chosen on CPUs that have AVX512_BF16.
#define SIFT_VEC_WIDTH 16
#define SIFT_ISA_NS avx512bf16
#define SIFT_DPBF16 1
#include "cpu/flash_attention_impl.inc"
