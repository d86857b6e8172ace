// AVX2 variant of the CPU attention kernel (built with -mavx2 -mfma).
#define SIFT_VEC_WIDTH 8
#define SIFT_ISA_NS avx2
#include "cpu/flash_attention_impl.inc"
