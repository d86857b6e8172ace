// Baseline x86-64 (SSE2) variant of the CPU attention kernel: runs on any CPU.
#define SIFT_VEC_WIDTH 4
#define SIFT_ISA_NS scalar
#include "cpu/flash_attention_impl.inc"
