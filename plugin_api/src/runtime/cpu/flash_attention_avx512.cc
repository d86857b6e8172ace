// AVX-512 variant of the CPU attention kernel (built with -mavx512f -mavx512bw -mavx512vl -mfma).
#define SIFT_VEC_WIDTH 16
#define SIFT_ISA_NS avx512
#include "cpu/flash_attention_impl.inc"
