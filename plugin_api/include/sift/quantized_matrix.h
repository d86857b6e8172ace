// A weight matrix kept in GGUF block format, multiplied without dequantising it first.
//
// QuantizedMatrix holds `rows x cols` weights whose rows are ggml blocks (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K) or plain F32/F16/BF16 values. Row ranges may differ in type (a fused
// q/k/v or gate/up matrix made by ConcatRows), and rows may be reordered (PermuteRows). The
// product y = x W^T multiplies fp32 activations by the exactly dequantised weights (each equal to
// DequantizeRow's; a zero may differ in sign) with fp32 accumulation: it equals the dequantised
// product up to summation order (QuantOptions::int8_activations trades that for speed).
//
// OWNERSHIP: a QuantizedMatrix owns a copy of its bytes (never points into a file mapping);
//            copies share the same immutable bytes (refcounted, like at::Tensor).
// THREADING: immutable after construction: any number of threads may call MatMul/Dequantize on
//            one object at once. MatMul splits rows over LibTorch's intra-op pool
//            (at::parallel_for) and allocates nothing per call after the first on a thread,
//            except the returned tensor of the allocating overloads.
// ERRORS:    factories and operations throw sift::Error on a bad type, shape, permutation, dtype
//            or a CPU kernel level the machine lacks, naming what is wrong.
#ifndef SIFT_QUANTIZED_MATRIX_H_
#define SIFT_QUANTIZED_MATRIX_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sift/ggml_types.h"

namespace sift {

struct GgufTensorInfo;

// CPU kernel levels, lowest first. kAvx2 needs AVX2 + FMA + F16C; kAvx512 needs AVX-512 F, BW
// and VL on top of that.
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// "scalar", "avx2", "avx512".
const char* CpuIsaName(CpuIsa isa);
// Parses a CpuIsaName; throws sift::Error on anything else.
CpuIsa ParseCpuIsa(const std::string& name);
// The highest level this CPU (and OS) supports.
CpuIsa DetectedCpuIsa();
// The level used by default: DetectedCpuIsa(), capped by $SIFT_CPU_ISA (scalar|avx2|avx512) when
// set. Read once, at first use; a value above what the CPU has, or not a level name, throws.
CpuIsa DefaultCpuIsa();

// Kernel choice for one call. The defaults are what the engine uses.
struct QuantOptions {
  // Kernel level; unset means DefaultCpuIsa(). A level above DetectedCpuIsa() throws. For tests
  // and benchmarks.
  std::optional<CpuIsa> isa;
  // Quantise each activation row to int8 per 32-element group (scale max|x| / 127, round to
  // nearest) and multiply in integers, as llama.cpp does: fewer instructions per weight, at the
  // cost of the activation rounding (measured in docs/results/quant-kernels.md). Used where the
  // level has int8 kernels (avx2: vpmaddubsw; avx512 with AVX-512 VNNI: vpdpbusd) and the row
  // type is a block type; otherwise the fp32 kernels run. Off: the exact fp32 path. On a matrix
  // made by PackedForInt8() on an AVX-512 VNNI CPU, its packed Q4_1 and Q8_0 rows are read
  // instead (512-bit vpdpbusd, 16 weight rows per instruction).
  bool int8_activations = false;
};

// True where products with int8 activations read rows packed by QuantizedMatrix::PackedForInt8():
// the default level is avx512 and the CPU has AVX-512 VNNI. There int8 activations are the faster
// decode (docs/engine.md#int8-activations) and the engine picks them by default.
bool PackedInt8Available();

// Name of the kernel `options` select on this machine: "avx512-fp32", "avx2-fp32",
// "scalar-fp32", "avx512vnni-int8" or "avx2-int8" (for `sift-model info` and /metrics).
std::string QuantKernelName(const QuantOptions& options = {});

class QuantizedMatrix {
 public:
  QuantizedMatrix() = default;  // 0 x 0

  // Copies `rows` rows of `cols` elements of `type` from `data` (rows * GgmlRowBytes(type, cols)
  // bytes, any alignment). Throws if the type is not supported or cols is not a whole number of
  // blocks.
  static QuantizedMatrix FromBytes(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data);
  // A 2-D GGUF tensor: rows = ne[1], cols = ne[0] (torch shape (ne[1], ne[0])).
  static QuantizedMatrix FromGguf(const GgufTensorInfo& tensor);
  // A 2-D CPU tensor of dtype float, bfloat16 or half, stored as F32, BF16 or F16 rows.
  static QuantizedMatrix FromTensor(const at::Tensor& weight);
  // The rows of every part, in order (a fused q/k/v or gate/up matrix). All parts need the same
  // cols; their types may differ.
  static QuantizedMatrix ConcatRows(const std::vector<QuantizedMatrix>& parts);

  // Row i of the result is row order[i] of this matrix. `order` must be a permutation of
  // [0, rows).
  QuantizedMatrix PermuteRows(const std::vector<int64_t>& order) const;
  // A copy that also holds its Q4_1 and Q8_0 rows packed for the AVX-512 VNNI int8 kernel: 16
  // rows interleaved per 32-column group, about as many bytes again as those rows. Products with
  // QuantOptions::int8_activations at the avx512 level read the packed rows (any rows outside
  // whole groups of 16 read the blocks); everything else reads the blocks as before. A plain copy
  // where PackedInt8Available() is false (no AVX-512 VNNI, or SIFT_CPU_ISA below avx512).
  // PermuteRows and ConcatRows drop the packing.
  QuantizedMatrix PackedForInt8() const;
  // Bytes of the packed rows (0 when none).
  int64_t packed_nbytes() const { return packed_.defined() ? packed_.numel() : 0; }

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Bytes of weight data (what one product with n = 1 reads).
  int64_t nbytes() const { return bytes_.defined() ? bytes_.numel() : 0; }
  // Type of row r, and a short description of the row ranges ("Q4_1[0,960)").
  GgmlType RowType(int64_t r) const;
  std::string Describe() const;

  // y = x W^T. x: (n, cols) float with unit column stride (anything else is converted first,
  // which allocates); returns (n, rows) float. n = 0 gives an empty result.
  at::Tensor MatMul(const at::Tensor& x, const QuantOptions& options = {}) const;
  // The same into `out`: (n, rows) float on the CPU with unit column stride (e.g. a column slice
  // of a wider buffer). Allocates nothing for float x.
  void MatMulOut(const at::Tensor& x, at::Tensor& out, const QuantOptions& options = {}) const;
  // Raw form: x is n rows of cols floats (row stride ldx), y gets n rows of rows() floats (row
  // stride ldy).
  void MatMul(const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
              const QuantOptions& options = {}) const;

  // The whole matrix, (rows, cols), as float, bfloat16 or half (rounded to nearest even from the
  // exact float values). Parallel over rows.
  at::Tensor Dequantize(at::ScalarType dtype = at::kFloat, const QuantOptions& options = {}) const;
  // Rows ids[0..k) as (k, cols) of `dtype` (an embedding lookup). ids: 1-D integer tensor with
  // values in [0, rows).
  at::Tensor DequantizeRows(const at::Tensor& ids, at::ScalarType dtype = at::kFloat,
                            const QuantOptions& options = {}) const;

 private:
  // A run of rows of one type, stored back to back from `offset` in bytes_.
  struct Segment {
    GgmlType type;
    int64_t begin, end;  // rows [begin, end)
    int64_t offset;      // byte offset of row `begin`
    int64_t row_bytes;
    // PackedForInt8: byte offset in packed_ of rows [begin, begin + 16 * packed_tiles); -1: none.
    int64_t packed_offset = -1;
    int64_t packed_tiles = 0;
  };
  const Segment& SegmentOf(int64_t row) const;
  const uint8_t* RowData(int64_t row) const;
  class Builder;

  int64_t rows_ = 0, cols_ = 0;
  std::vector<Segment> segments_;
  at::Tensor bytes_;   // uint8, 1-D, all rows back to back
  at::Tensor packed_;  // uint8, 1-D: PackedForInt8's rows; undefined when none
};

// The row order that undoes llama.cpp's q/k permutation for `n_heads` heads of `head_dim`
// (the order weights.cc's UnpermuteRows produces): PermuteRows(LlamaQkRowOrder(h, d)) turns GGUF
// order into Hugging Face order.
std::vector<int64_t> LlamaQkRowOrder(int64_t n_heads, int64_t head_dim);

}  // namespace sift

#endif  // SIFT_QUANTIZED_MATRIX_H_
