// QuantizedMatrix (sift/quantized_matrix.h) on hand-made rows of every supported type, at every
// CPU kernel level this machine has (scalar always), against DequantizeRow + a double-precision
// dot product.
//
// Tolerance of the fp32-activation products: the kernels multiply the exact dequantised weights
// (checked bit for bit through Dequantize) by fp32 activations and accumulate in fp32, each
// product reaching the result through at most cols/8 + 64 roundings (per-lane partial sums, the
// horizontal sum, a scalar tail). The classic bound for such a sum is
//   |y - y_exact| <= k * 2^-24 * sum_i |w_i x_i|,   k = cols/8 + 64,
// which is what ExpectClose checks. A wrong weight shifts y by about |w_i x_i|, on average
// sum |w x| / cols, 10-100x above this bound at the lengths used here.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "sift/error.h"
#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/model.h"
#include "sift/quantized_matrix.h"

namespace sift {
namespace {

const GgmlType kBlockTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
const GgmlType kPlainTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16};

std::vector<CpuIsa> Levels() {
  std::vector<CpuIsa> levels;
  for (int i = 0; i <= static_cast<int>(DetectedCpuIsa()); ++i) {
    levels.push_back(static_cast<CpuIsa>(i));
  }
  return levels;
}

QuantOptions At(CpuIsa isa, bool int8 = false) {
  QuantOptions o;
  o.isa = isa;
  o.int8_activations = int8;
  return o;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, sizeof(h));
}

// Offsets of the fp16 scale fields in a block (d first, then m / dmin where the type has one).
std::vector<int> ScaleOffsets(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

// `rows` rows of `cols` elements of `type`: random quant bytes with per-block scales drawn from
// ordinary values and edge cases (zero, the largest half, subnormal halves, negative), some
// blocks with every quant at its maximum or minimum. Plain types get random values of mixed
// magnitude, zeros and subnormals included.
std::vector<uint8_t> RandomRows(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> bytes(GgmlRowBytes(type, cols) * static_cast<uint64_t>(rows));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  if (type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16) {
    const int64_t count = rows * cols;
    for (int64_t i = 0; i < count; ++i) {
      float v = unit(rng);
      switch (rng() % 8) {
        case 0:
          v = 0;
          break;
        case 1:
          v *= 3e4f;
          break;
        case 2:
          v *= 1e-6f;
          break;
        default:
          break;
      }
      if (type == GgmlType::kF32) {
        std::memcpy(&bytes[4 * i], &v, 4);
      } else {
        const uint16_t h = type == GgmlType::kF16 ? FloatToHalf(v) : FloatToBF16(v);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
    }
    return bytes;
  }
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const size_t block_bytes = static_cast<size_t>(GgmlBlockBytes(type));
  for (size_t at = 0; at < bytes.size(); at += block_bytes) {
    uint8_t* block = &bytes[at];
    const int mode = static_cast<int>(rng() % 10);
    if (mode == 7 || mode == 8) {  // every quant byte at its max / min (scales rewritten below)
      std::memset(block, mode == 7 ? 0xFF : 0x00, block_bytes);
    }
    for (int off : ScaleOffsets(type)) {
      float s = unit(rng);
      switch (mode) {
        case 0:
          s = 0;  // zero scale (and zero min)
          break;
        case 1:
          s = s < 0 ? -65504.0f : 65504.0f;  // largest half
          break;
        case 2:
          s = static_cast<float>(1 + rng() % 1023) * std::ldexp(1.0f, -24);  // subnormal half
          break;
        case 3:
          s = -std::fabs(s);
          break;
        default:
          break;
      }
      PutHalf(block + off, s);
    }
  }
  return bytes;
}

// Activations in [-1, 1] with some zeros and some large values.
std::vector<float> RandomActivations(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(count));
  for (float& v : x) {
    v = unit(rng);
    const unsigned r = rng() % 16;
    if (r == 0) v = 0;
    if (r == 1) v *= 100;
  }
  return x;
}

// Exact dequantised rows (DequantizeRow), (rows, cols) row-major.
std::vector<float> Reference(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows,
                             int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const uint64_t row_bytes = GgmlRowBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(type, bytes.data() + r * row_bytes, w.data() + r * cols, cols);
  }
  return w;
}

// y (n, rows) against w (rows, cols) and x (n, cols) in double, within the bound above.
void ExpectClose(const float* y, const std::vector<float>& w, const float* x, int64_t n,
                 int64_t rows, int64_t cols, const std::string& what) {
  const double k = static_cast<double>(cols) / 8 + 64;
  int failures = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double p = static_cast<double>(w[r * cols + i]) * x[j * cols + i];
        exact += p;
        magnitude += std::fabs(p);
      }
      const double got = y[j * rows + r];
      const double tol = k * std::ldexp(1.0, -24) * magnitude;
      if (!(std::fabs(got - exact) <= tol) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[" << j << ", " << r << "] = " << got << ", exact " << exact
                      << " (|diff| " << std::fabs(got - exact) << " > tol " << tol << ")";
      }
    }
  }
}

// Every weight of Dequantize() (fp32) equals DequantizeRow's; `order` maps result rows to rows
// of w.
void ExpectSameValues(const at::Tensor& deq, const std::vector<float>& w, int64_t cols,
                      const std::vector<int64_t>& order, const std::string& what) {
  ASSERT_EQ(deq.scalar_type(), at::kFloat);
  ASSERT_EQ(deq.size(0), static_cast<int64_t>(order.size()));
  const float* d = deq.data_ptr<float>();
  int failures = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      const float want = w[order[r] * cols + i];
      const float got = d[static_cast<int64_t>(r) * cols + i];
      if (got != want && ++failures <= 5) {
        ADD_FAILURE() << what << ": element (" << r << ", " << i << ") is " << got << ", "
                      << "DequantizeRow gives " << want;
      }
    }
  }
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Column counts to try: several blocks (an odd number, so the int8 kernels' block pairs leave one
// over) and a single block; plain rows also get lengths that are no multiple of any vector width.
std::vector<int64_t> ColsFor(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return {5, 77, 416};
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return {256, 768};
    default:
      return {32, 416};
  }
}

std::vector<GgmlType> AllTypes() {
  std::vector<GgmlType> all(std::begin(kPlainTypes), std::end(kPlainTypes));
  all.insert(all.end(), std::begin(kBlockTypes), std::end(kBlockTypes));
  return all;
}

TEST(QuantizedMatrixTest, ProductMatchesDequantizedReferenceForEveryTypeAndLevel) {
  std::mt19937 rng(1234);
  for (GgmlType type : AllTypes()) {
    for (int64_t cols : ColsFor(type)) {
      for (int64_t rows : {int64_t{1}, int64_t{19}}) {
        const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
        const std::vector<float> w = Reference(type, bytes, rows, cols);
        const QuantizedMatrix m = QuantizedMatrix::FromBytes(type, rows, cols, bytes.data());
        ASSERT_EQ(m.rows(), rows);
        ASSERT_EQ(m.cols(), cols);
        ASSERT_EQ(m.nbytes(), static_cast<int64_t>(bytes.size()));
        const std::vector<float> x = RandomActivations(8 * cols, rng);
        for (CpuIsa isa : Levels()) {
          for (int64_t n : {1, 2, 3, 4, 5, 7, 8}) {
            std::vector<float> y(static_cast<size_t>(n * rows), NAN);
            m.MatMul(x.data(), n, cols, y.data(), rows, At(isa));
            ExpectClose(y.data(), w, x.data(), n, rows, cols,
                        std::string(GgmlTypeName(type)) + " " + CpuIsaName(isa) + " cols " +
                            std::to_string(cols) + " rows " + std::to_string(rows) + " n " +
                            std::to_string(n));
          }
        }
      }
    }
  }
}

TEST(QuantizedMatrixTest, DequantizeIsBitExactAtEveryLevel) {
  std::mt19937 rng(99);
  for (GgmlType type : AllTypes()) {
    for (int64_t cols : ColsFor(type)) {
      const int64_t rows = 7;
      const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
      const std::vector<float> w = Reference(type, bytes, rows, cols);
      const QuantizedMatrix m = QuantizedMatrix::FromBytes(type, rows, cols, bytes.data());
      for (CpuIsa isa : Levels()) {
        const std::string what = std::string(GgmlTypeName(type)) + " " + CpuIsaName(isa);
        ExpectSameValues(m.Dequantize(at::kFloat, At(isa)), w, cols, Iota(rows), what);
        const std::vector<int64_t> pick = {6, 0, 6, 3};
        ExpectSameValues(m.DequantizeRows(at::tensor(pick), at::kFloat, At(isa)), w, cols, pick,
                         what + " rows");
      }
      // bf16 / half: the exact floats rounded to nearest even, as at::Tensor::to rounds them.
      const at::Tensor exact = m.Dequantize(at::kFloat);
      for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
        const at::Tensor got = m.Dequantize(dtype);
        ASSERT_EQ(got.scalar_type(), dtype);
        EXPECT_TRUE(at::equal(got, exact.to(dtype))) << GgmlTypeName(type) << " " << dtype;
      }
    }
  }
}

TEST(QuantizedMatrixTest, RawProductHonoursStrides) {
  std::mt19937 rng(5);
  const int64_t rows = 9, cols = 64, n = 3, ldx = 80, ldy = 13;
  const std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ4_1, rows, cols, rng);
  const QuantizedMatrix m = QuantizedMatrix::FromBytes(GgmlType::kQ4_1, rows, cols, bytes.data());
  const std::vector<float> xs = RandomActivations(n * ldx, rng);
  std::vector<float> x(static_cast<size_t>(n * cols));  // the same rows, packed
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(&xs[j * ldx], cols, &x[j * cols]);
  }
  for (CpuIsa isa : Levels()) {
    std::vector<float> y(static_cast<size_t>(n * ldy), -7.0f);
    m.MatMul(xs.data(), n, ldx, y.data(), ldy, At(isa));
    std::vector<float> packed(static_cast<size_t>(n * rows));
    for (int64_t j = 0; j < n; ++j) {
      std::copy_n(&y[j * ldy], rows, &packed[j * rows]);
      for (int64_t r = rows; r < ldy; ++r) EXPECT_EQ(y[j * ldy + r], -7.0f) << "wrote past a row";
    }
    ExpectClose(packed.data(), Reference(GgmlType::kQ4_1, bytes, rows, cols), x.data(), n, rows,
                cols, CpuIsaName(isa));
  }
}

TEST(QuantizedMatrixTest, ConcatenatedRowRangesKeepTheirTypes) {
  std::mt19937 rng(77);
  const int64_t cols = 512;  // a multiple of every block size
  const std::vector<std::pair<GgmlType, int64_t>> parts = {
      {GgmlType::kQ4_1, 5}, {GgmlType::kQ8_0, 3}, {GgmlType::kQ6_K, 4},
      {GgmlType::kQ6_K, 2}, {GgmlType::kF32, 1},  {GgmlType::kQ4_0, 6}};
  std::vector<QuantizedMatrix> matrices;
  std::vector<float> w;
  int64_t rows = 0;
  for (const auto& [type, count] : parts) {
    const std::vector<uint8_t> bytes = RandomRows(type, count, cols, rng);
    matrices.push_back(QuantizedMatrix::FromBytes(type, count, cols, bytes.data()));
    const std::vector<float> part = Reference(type, bytes, count, cols);
    w.insert(w.end(), part.begin(), part.end());
    rows += count;
  }
  const QuantizedMatrix m = QuantizedMatrix::ConcatRows(matrices);
  ASSERT_EQ(m.rows(), rows);
  EXPECT_EQ(m.Describe(), "Q4_1[0,5) Q8_0[5,8) Q6_K[8,14) F32[14,15) Q4_0[15,21)");
  EXPECT_EQ(m.RowType(4), GgmlType::kQ4_1);
  EXPECT_EQ(m.RowType(5), GgmlType::kQ8_0);
  EXPECT_EQ(m.RowType(13), GgmlType::kQ6_K);
  EXPECT_EQ(m.RowType(20), GgmlType::kQ4_0);
  int64_t total = 0;
  for (const QuantizedMatrix& p : matrices) total += p.nbytes();
  EXPECT_EQ(m.nbytes(), total);
  const std::vector<float> x = RandomActivations(5 * cols, rng);
  for (CpuIsa isa : Levels()) {
    ExpectSameValues(m.Dequantize(at::kFloat, At(isa)), w, cols, Iota(rows), CpuIsaName(isa));
    for (int64_t n : {1, 5}) {
      std::vector<float> y(static_cast<size_t>(n * rows));
      m.MatMul(x.data(), n, cols, y.data(), rows, At(isa));
      ExpectClose(y.data(), w, x.data(), n, rows, cols, CpuIsaName(isa));
    }
  }
  EXPECT_THROW(QuantizedMatrix::ConcatRows({}), Error);
  EXPECT_THROW(QuantizedMatrix::ConcatRows(
                   {matrices[0], QuantizedMatrix::FromBytes(GgmlType::kQ8_0, 1, 32,
                                                            std::vector<uint8_t>(34).data())}),
               Error);
}

TEST(QuantizedMatrixTest, PermutedRowsGiveThePermutedProduct) {
  std::mt19937 rng(31);
  const int64_t cols = 256;
  const std::vector<uint8_t> a = RandomRows(GgmlType::kQ4_K, 6, cols, rng);
  const std::vector<uint8_t> b = RandomRows(GgmlType::kQ8_0, 5, cols, rng);
  const QuantizedMatrix m =
      QuantizedMatrix::ConcatRows({QuantizedMatrix::FromBytes(GgmlType::kQ4_K, 6, cols, a.data()),
                                   QuantizedMatrix::FromBytes(GgmlType::kQ8_0, 5, cols, b.data())});
  std::vector<int64_t> order = Iota(m.rows());
  std::shuffle(order.begin(), order.end(), rng);
  const QuantizedMatrix p = m.PermuteRows(order);
  ASSERT_EQ(p.rows(), m.rows());
  EXPECT_EQ(p.nbytes(), m.nbytes());
  for (int64_t r = 0; r < p.rows(); ++r) EXPECT_EQ(p.RowType(r), m.RowType(order[r]));
  const std::vector<float> x = RandomActivations(3 * cols, rng);
  for (CpuIsa isa : Levels()) {
    for (bool int8 : {false, true}) {
      const at::Tensor xt = at::from_blob(const_cast<float*>(x.data()), {3, cols});
      const at::Tensor y = m.MatMul(xt, At(isa, int8));
      const at::Tensor yp = p.MatMul(xt, At(isa, int8));
      // Each row's result depends only on its bytes and x: permuting rows permutes it exactly.
      EXPECT_TRUE(at::equal(yp, y.index_select(1, at::tensor(order))))
          << CpuIsaName(isa) << (int8 ? " int8" : "");
    }
  }
  EXPECT_THROW(m.PermuteRows({0, 1}), Error);                              // wrong length
  EXPECT_THROW(m.PermuteRows({0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), Error);   // repeated
  EXPECT_THROW(m.PermuteRows({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11}), Error);  // out of range
}

TEST(QuantizedMatrixTest, LlamaQkRowOrderMatchesTheTorchUnpermutation) {
  const int64_t heads = 3, head_dim = 8;
  // weights.cc's UnpermuteRows on a column of row numbers.
  const at::Tensor rows = at::arange(heads * head_dim, at::kLong);
  const at::Tensor want =
      rows.view({heads, head_dim / 2, 2}).transpose(1, 2).reshape({heads * head_dim});
  const std::vector<int64_t> order = LlamaQkRowOrder(heads, head_dim);
  EXPECT_TRUE(at::equal(at::tensor(order), want));
  EXPECT_THROW(LlamaQkRowOrder(2, 7), Error);
}

TEST(QuantizedMatrixTest, ThreadsSplitRowsWithoutChangingResults) {
  std::mt19937 rng(8);
  const int64_t rows = 3000, cols = 256, n = 3;  // ~500 KiB of Q4_1: many parallel tasks
  const std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ4_1, rows, cols, rng);
  const QuantizedMatrix m = QuantizedMatrix::FromBytes(GgmlType::kQ4_1, rows, cols, bytes.data());
  const std::vector<float> x = RandomActivations(n * cols, rng);
  const at::Tensor xt = at::from_blob(const_cast<float*>(x.data()), {n, cols});
  const int saved = at::get_num_threads();
  for (bool int8 : {false, true}) {
    at::set_num_threads(1);
    const at::Tensor one = m.MatMul(xt, At(DetectedCpuIsa(), int8));
    at::set_num_threads(2);
    const at::Tensor two = m.MatMul(xt, At(DetectedCpuIsa(), int8));
    EXPECT_TRUE(at::equal(one, two)) << (int8 ? "int8" : "fp32");
    if (!int8) {
      ExpectClose(two.data_ptr<float>(), Reference(GgmlType::kQ4_1, bytes, rows, cols), x.data(), n,
                  rows, cols, "2 threads");
    }
  }
  at::set_num_threads(saved);
}

// int8 activations. Activations that are multiples of 1/64 with a group maximum of exactly
// 127/64 quantise without loss (scale 1/64), so the integer kernels must then reproduce the
// exact product up to fp32 rounding of the per-group terms: checked against
// 5e-5 * sum_i max|w| |x_i| (w's row maximum), 10x below the error of one wrong weight here.
std::vector<float> ExactlyQuantizable(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 255) - 127) / 64;
  for (int64_t g = 0; g < n * cols / 32; ++g) {
    x[static_cast<size_t>(32 * g + rng() % 32)] = (rng() & 1) ? 127.0f / 64 : -127.0f / 64;
  }
  return x;
}

// y (n, rows) of int8 products with ExactlyQuantizable activations x against w (rows, cols):
// within 5e-5 * sum_i max|w of the row| |x_i| of the exact product.
void ExpectExactOnLossless(const float* y, const std::vector<float>& w, const std::vector<float>& x,
                           int64_t n, int64_t rows, int64_t cols, const std::string& what) {
  int failures = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, scale = 0, wmax = 0;
      for (int64_t i = 0; i < cols; ++i) wmax = std::max(wmax, std::fabs(1.0 * w[r * cols + i]));
      for (int64_t i = 0; i < cols; ++i) {
        exact += static_cast<double>(w[r * cols + i]) * x[j * cols + i];
        scale += wmax * std::fabs(x[j * cols + i]);
      }
      const double got = y[j * rows + r];
      if (!(std::fabs(got - exact) <= 5e-5 * scale) && ++failures <= 5) {
        ADD_FAILURE() << what << " n " << n << " y[" << j << ", " << r << "] = " << got
                      << ", exact " << exact << " (tol " << 5e-5 * scale << ")";
      }
    }
  }
}

TEST(QuantizedMatrixTest, Int8KernelsAreExactOnLosslessActivations) {
  std::mt19937 rng(2024);
  for (GgmlType type : kBlockTypes) {
    for (int64_t cols : ColsFor(type)) {
      const int64_t rows = 11;
      const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
      const std::vector<float> w = Reference(type, bytes, rows, cols);
      const QuantizedMatrix m = QuantizedMatrix::FromBytes(type, rows, cols, bytes.data());
      const std::vector<float> x = ExactlyQuantizable(8, cols, rng);
      for (CpuIsa isa : Levels()) {
        if (isa == CpuIsa::kScalar) continue;  // no int8 kernels there (see the next test)
        for (int64_t n : {1, 2, 3, 4, 5, 8}) {
          std::vector<float> y(static_cast<size_t>(n * rows));
          m.MatMul(x.data(), n, cols, y.data(), rows, At(isa, true));
          ExpectExactOnLossless(y.data(), w, x, n, rows, cols,
                                std::string(GgmlTypeName(type)) + " " +
                                    QuantKernelName(At(isa, true)) + " cols " +
                                    std::to_string(cols));
        }
      }
    }
  }
}

TEST(QuantizedMatrixTest, Int8ErrorStaysWithinTheActivationRounding) {
  // |x - x_quantised| <= max|x of its group| / 254 per element, so
  // |y_int8 - y| <= sum_i |w_i| * amax_group(i) / 254 (+ fp32 rounding).
  std::mt19937 rng(4);
  for (GgmlType type : kBlockTypes) {
    const int64_t cols = ColsFor(type).back(), rows = 13, n = 2;
    const std::vector<uint8_t> bytes = RandomRows(type, rows, cols, rng);
    const std::vector<float> w = Reference(type, bytes, rows, cols);
    const QuantizedMatrix m = QuantizedMatrix::FromBytes(type, rows, cols, bytes.data());
    const std::vector<float> x = RandomActivations(n * cols, rng);
    for (CpuIsa isa : Levels()) {
      std::vector<float> y(static_cast<size_t>(n * rows));
      m.MatMul(x.data(), n, cols, y.data(), rows, At(isa, true));
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t r = 0; r < rows; ++r) {
          double exact = 0, bound = 0, magnitude = 0;
          for (int64_t i = 0; i < cols; ++i) {
            double amax = 0;
            for (int64_t k = i / 32 * 32; k < i / 32 * 32 + 32; ++k) {
              amax = std::max(amax, std::fabs(1.0 * x[j * cols + k]));
            }
            const double wi = w[r * cols + i];
            exact += wi * x[j * cols + i];
            bound += std::fabs(wi) * amax / 254;
            magnitude += std::fabs(wi * x[j * cols + i]);
          }
          EXPECT_NEAR(y[j * rows + r], exact, 1.001 * bound + 1e-4 * magnitude)
              << GgmlTypeName(type) << " " << QuantKernelName(At(isa, true));
        }
      }
    }
  }
}

// PackedForInt8: on an AVX-512 VNNI CPU, Q4_1 and Q8_0 rows in whole tiles of 16 are multiplied
// from their packed copy. Its product must be the blocks' int8 product (the same integer dot per
// group and the same scales, summed in another fp32 order): checked against it within
// 1e-5 * sum_i |w_i x_i|, far below one wrong weight or scale (a weight changes y by about
// sum |w x| / cols, 1/416 of it here), and against the exact product on losslessly quantised
// activations. Row counts leave partial tiles, and a second segment starts off the tile grid.
bool HasPackedKernel() { return QuantKernelName(At(DetectedCpuIsa(), true)) == "avx512vnni-int8"; }

TEST(QuantizedMatrixTest, PackedRowsGiveTheBlocksInt8Product) {
  std::mt19937 rng(16);
  const int64_t cols = 416;
  for (GgmlType first : {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    for (int64_t rows : {16, 37, 85}) {
      // Rows of `first`, then 21 Q8_0 rows and 40 Q4_1 rows: segments off the 16-row grid.
      const std::vector<uint8_t> a = RandomRows(first, rows, cols, rng);
      const std::vector<uint8_t> b = RandomRows(GgmlType::kQ8_0, 21, cols, rng);
      const std::vector<uint8_t> c = RandomRows(GgmlType::kQ4_1, 40, cols, rng);
      const QuantizedMatrix m = QuantizedMatrix::ConcatRows(
          {QuantizedMatrix::FromBytes(first, rows, cols, a.data()),
           QuantizedMatrix::FromBytes(GgmlType::kQ8_0, 21, cols, b.data()),
           QuantizedMatrix::FromBytes(GgmlType::kQ4_1, 40, cols, c.data())});
      const int64_t total = m.rows();
      const QuantizedMatrix p = m.PackedForInt8();
      SCOPED_TRACE(std::string(GgmlTypeName(first)) + " x " + std::to_string(rows));
      if (!HasPackedKernel()) {
        EXPECT_EQ(p.packed_nbytes(), 0);
        continue;
      }
      // Tiles: the first segment's (Q4_0: none), one of the 21 Q8_0 rows, two of the 40 Q4_1.
      const int64_t first_tiles = first == GgmlType::kQ4_0 ? 0 : rows / 16;
      const int64_t first_bytes = first == GgmlType::kQ4_1 ? 320 : 544;
      EXPECT_EQ(p.packed_nbytes(), first_tiles * 13 * first_bytes + 13 * 544 + 2 * 13 * 320);
      std::vector<float> w = Reference(first, a, rows, cols);
      for (const auto& [type, bytes, count] :
           {std::tuple{GgmlType::kQ8_0, &b, 21}, std::tuple{GgmlType::kQ4_1, &c, 40}}) {
        const std::vector<float> more = Reference(type, *bytes, count, cols);
        w.insert(w.end(), more.begin(), more.end());
      }
      for (int64_t n : {1, 2, 3, 8, 9, 17}) {
        const std::vector<float> x = RandomActivations(n * cols, rng);
        std::vector<float> want(static_cast<size_t>(n * total)), got(want.size());
        m.MatMul(x.data(), n, cols, want.data(), total, At(CpuIsa::kAvx512, true));
        p.MatMul(x.data(), n, cols, got.data(), total, At(CpuIsa::kAvx512, true));
        int failures = 0;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t r = 0; r < total; ++r) {
            double magnitude = 0;
            for (int64_t i = 0; i < cols; ++i) {
              magnitude += std::fabs(1.0 * w[r * cols + i] * x[j * cols + i]);
            }
            const size_t at = static_cast<size_t>(j * total + r);
            if (!(std::fabs(got[at] - want[at]) <= 1e-5 * magnitude) && ++failures <= 5) {
              ADD_FAILURE() << "n " << n << " y[" << j << ", " << r << "] packed " << got[at]
                            << ", blocks " << want[at] << ", sum|w x| " << magnitude;
            }
          }
        }
        // Exactly quantisable activations: the exact product (see the int8 tests above).
        const std::vector<float> xe = ExactlyQuantizable(n, cols, rng);
        p.MatMul(xe.data(), n, cols, got.data(), total, At(CpuIsa::kAvx512, true));
        ExpectExactOnLossless(got.data(), w, xe, n, total, cols, "packed, lossless");
      }
      // Everything but the int8 product still reads the blocks.
      EXPECT_TRUE(at::equal(p.Dequantize(), m.Dequantize()));
      const std::vector<float> x = RandomActivations(3 * cols, rng);
      const at::Tensor xt = at::from_blob(const_cast<float*>(x.data()), {3, cols});
      EXPECT_TRUE(at::equal(p.MatMul(xt), m.MatMul(xt)));
    }
  }
}

TEST(QuantizedMatrixTest, PackedProductIsTheSameOnAnyNumberOfThreadsAndRows) {
  if (!HasPackedKernel()) GTEST_SKIP() << "no AVX-512 VNNI: PackedForInt8 packs nothing here";
  std::mt19937 rng(9);
  const int64_t rows = 3000, cols = 576, n = 5;  // many tiles: many parallel tasks
  const std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ4_1, rows, cols, rng);
  const QuantizedMatrix p =
      QuantizedMatrix::FromBytes(GgmlType::kQ4_1, rows, cols, bytes.data()).PackedForInt8();
  ASSERT_GT(p.packed_nbytes(), 0);
  const std::vector<float> x = RandomActivations(n * cols, rng);
  const at::Tensor xt = at::from_blob(const_cast<float*>(x.data()), {n, cols});
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = p.MatMul(xt, At(CpuIsa::kAvx512, true));
  at::set_num_threads(2);
  const at::Tensor two = p.MatMul(xt, At(CpuIsa::kAvx512, true));
  at::set_num_threads(saved);
  EXPECT_TRUE(at::equal(one, two));
  // Batch invariance: a row's result is the same bits alone as among n rows.
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(
        at::equal(p.MatMul(xt.narrow(0, j, 1), At(CpuIsa::kAvx512, true)), two.narrow(0, j, 1)))
        << "row " << j;
  }
}

TEST(QuantizedMatrixTest, KernelNamesAndLevels) {
  EXPECT_EQ(QuantKernelName(At(CpuIsa::kScalar)), "scalar-fp32");
  EXPECT_EQ(QuantKernelName(At(CpuIsa::kScalar, true)), "scalar-fp32");  // no int8 kernel
  if (DetectedCpuIsa() >= CpuIsa::kAvx2) {
    EXPECT_EQ(QuantKernelName(At(CpuIsa::kAvx2)), "avx2-fp32");
    EXPECT_EQ(QuantKernelName(At(CpuIsa::kAvx2, true)), "avx2-int8");
  }
  if (DetectedCpuIsa() == CpuIsa::kAvx512) {
    EXPECT_EQ(QuantKernelName(At(CpuIsa::kAvx512)), "avx512-fp32");
    const std::string int8 = QuantKernelName(At(CpuIsa::kAvx512, true));
    EXPECT_TRUE(int8 == "avx512vnni-int8" || int8 == "avx2-int8") << int8;
  } else {
    EXPECT_THROW(QuantKernelName(At(CpuIsa::kAvx512)), Error);
  }
  EXPECT_LE(DefaultCpuIsa(), DetectedCpuIsa());
  // Packed rows (and so int8 activations by default) exactly where the default level's int8
  // kernel is the AVX-512 VNNI one.
  EXPECT_EQ(PackedInt8Available(), QuantKernelName(At(DefaultCpuIsa(), true)) == "avx512vnni-int8");
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa);
  }
  EXPECT_THROW(ParseCpuIsa("avx1024"), Error);
}

// Run by the next test in a child process with $SIFT_CPU_ISA set (DefaultCpuIsa reads it once).
TEST(QuantizedMatrixEnvTest, DefaultLevelFollowsTheEnvironment) {
  const char* env = std::getenv("SIFT_CPU_ISA");
  if (env == nullptr) {
    EXPECT_EQ(DefaultCpuIsa(), DetectedCpuIsa());
    return;
  }
  if (std::string(env) == "bogus") {
    EXPECT_THROW(DefaultCpuIsa(), Error);
    EXPECT_THROW(QuantKernelName(), Error);
    return;
  }
  EXPECT_EQ(DefaultCpuIsa(), ParseCpuIsa(env));
  EXPECT_EQ(QuantKernelName(), std::string(env) + "-fp32");
  // A capped level has no packed kernel, so --activations auto gives fp32 there, and packing
  // makes nothing that no product would read.
  if (DefaultCpuIsa() != CpuIsa::kAvx512) {
    EXPECT_FALSE(PackedInt8Available());
    ModelOptions native;
    EXPECT_FALSE(Int8ActivationsFor("auto", native));
    std::mt19937 rng(3);
    const std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ4_1, 32, 64, rng);
    EXPECT_EQ(QuantizedMatrix::FromBytes(GgmlType::kQ4_1, 32, 64, bytes.data())
                  .PackedForInt8()
                  .packed_nbytes(),
              0);
  }
}

// --activations: int8 and fp32 as given; auto: int8 where native weights on the CPU would read
// packed rows.
TEST(QuantizedMatrixTest, ActivationsModeFollowsThePackedKernel) {
  ModelOptions native;
  EXPECT_TRUE(Int8ActivationsFor("int8", native));
  EXPECT_FALSE(Int8ActivationsFor("fp32", native));
  EXPECT_EQ(Int8ActivationsFor("auto", native), PackedInt8Available());
  ModelOptions dense;
  dense.weights = WeightFormat::kDense;
  EXPECT_FALSE(Int8ActivationsFor("auto", dense));
  ModelOptions cuda;
  cuda.device = at::Device(at::kCUDA, 0);
  EXPECT_FALSE(Int8ActivationsFor("auto", cuda));
  EXPECT_THROW(Int8ActivationsFor("int4", native), Error);
  for (const char* mode : {"auto", "int8", "fp32"}) EXPECT_TRUE(IsActivationsMode(mode)) << mode;
  for (const char* mode : {"int4", "", "INT8"}) EXPECT_FALSE(IsActivationsMode(mode)) << mode;
}

TEST(QuantizedMatrixTest, SiftCpuIsaCapsTheDefaultLevel) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  for (const char* value : {"scalar", "bogus"}) {
    const std::string command = std::string("SIFT_CPU_ISA=") + value + " '" + self +
                                "' --gtest_filter=QuantizedMatrixEnvTest.* > /dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
}

TEST(QuantizedMatrixTest, TensorFormsCheckShapesAndConvert) {
  std::mt19937 rng(12);
  const int64_t rows = 4, cols = 64;
  const std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ8_0, rows, cols, rng);
  const QuantizedMatrix m = QuantizedMatrix::FromBytes(GgmlType::kQ8_0, rows, cols, bytes.data());
  const at::Tensor w = m.Dequantize();
  const at::Tensor x = at::randn({3, cols});
  const at::Tensor y = m.MatMul(x);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, rows}));
  EXPECT_TRUE(at::allclose(y, at::linear(x, w), 1e-5, 1e-4));
  // bf16 activations are converted to float first.
  const at::Tensor xb = x.to(at::kBFloat16);
  EXPECT_TRUE(at::equal(m.MatMul(xb), m.MatMul(xb.to(at::kFloat))));
  at::Tensor out = at::full({3, rows}, NAN);
  m.MatMulOut(x, out);
  EXPECT_TRUE(at::equal(out, y));
  EXPECT_EQ(m.MatMul(at::zeros({0, cols})).sizes(), (std::vector<int64_t>{0, rows}));
  // Row-strided views in and out are used in place: x rows inside a wider buffer, y written into
  // a column slice of a wider output (as a fused projection's consumer might want).
  const at::Tensor wide_x = at::randn({3, cols + 10});
  at::Tensor wide_out = at::full({3, rows + 5}, -1.0f);
  at::Tensor slice = wide_out.narrow(1, 2, rows);
  m.MatMulOut(wide_x.narrow(1, 10, cols), slice);
  EXPECT_TRUE(at::equal(slice, m.MatMul(wide_x.narrow(1, 10, cols).contiguous())));
  EXPECT_TRUE(at::equal(wide_out.narrow(1, 0, 2), at::full({3, 2}, -1.0f)));
  EXPECT_TRUE(at::equal(wide_out.narrow(1, rows + 2, 3), at::full({3, 3}, -1.0f)));
  at::Tensor transposed = at::empty({rows, 3}).t();  // column stride != 1
  EXPECT_THROW(m.MatMulOut(x, transposed), Error);
  at::Tensor wrong = at::empty({3, rows + 1});
  EXPECT_THROW(m.MatMulOut(x, wrong), Error);
  EXPECT_THROW(m.MatMul(at::zeros({3, cols + 1})), Error);
  EXPECT_THROW(m.MatMul(at::zeros({cols})), Error);
  EXPECT_THROW(m.Dequantize(at::kDouble), Error);
  EXPECT_THROW(m.DequantizeRows(at::tensor(std::vector<int64_t>{0, rows})), Error);
  EXPECT_THROW(m.DequantizeRows(at::zeros({2})), Error);  // float ids
  EXPECT_THROW(m.RowType(rows), Error);

  // FromTensor keeps float / bf16 / half rows as they are.
  const at::Tensor wf = at::randn({5, 40});
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const QuantizedMatrix t = QuantizedMatrix::FromTensor(wf.to(dtype));
    EXPECT_TRUE(at::equal(t.Dequantize(), wf.to(dtype).to(at::kFloat))) << dtype;
    const at::Tensor xt = at::randn({2, 40});
    EXPECT_TRUE(at::allclose(t.MatMul(xt), at::linear(xt, wf.to(dtype).to(at::kFloat)), 1e-5, 1e-4))
        << dtype;
  }
  EXPECT_THROW(QuantizedMatrix::FromTensor(at::zeros({2, 3}, at::kDouble)), Error);
  EXPECT_THROW(QuantizedMatrix::FromTensor(at::zeros({6})), Error);
}

TEST(QuantizedMatrixTest, FactoriesRejectBadInput) {
  const std::vector<uint8_t> bytes(1024);
  EXPECT_THROW(QuantizedMatrix::FromBytes(GgmlType::kQ2_K, 1, 256, bytes.data()), Error);
  EXPECT_THROW(QuantizedMatrix::FromBytes(GgmlType::kQ4_0, 1, 48, bytes.data()), Error);
  EXPECT_THROW(QuantizedMatrix::FromBytes(GgmlType::kQ4_K, 1, 288, bytes.data()), Error);
  EXPECT_THROW(QuantizedMatrix::FromBytes(GgmlType::kF32, 1, 0, bytes.data()), Error);
  EXPECT_THROW(QuantizedMatrix::FromBytes(GgmlType::kF32, 1, 4, nullptr), Error);
  EXPECT_THROW(QuantizedMatrix::FromBytes(static_cast<GgmlType>(99), 1, 32, bytes.data()), Error);

  GgufTensorInfo t;
  t.name = "blk.0.attn_norm.weight";
  t.ne = {64};
  t.type = GgmlType::kF32;
  t.nbytes = 256;
  t.data = bytes.data();
  try {
    QuantizedMatrix::FromGguf(t);
    ADD_FAILURE() << "1-D tensor accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_norm.weight"), std::string::npos) << e.what();
  }
  t.ne = {32, 4};
  t.type = GgmlType::kQ4_0;
  t.nbytes = 4 * 18;
  const QuantizedMatrix ok = QuantizedMatrix::FromGguf(t);
  EXPECT_EQ(ok.rows(), 4);
  EXPECT_EQ(ok.cols(), 32);
  t.nbytes = 4 * 18 + 1;
  EXPECT_THROW(QuantizedMatrix::FromGguf(t), Error);

  const QuantizedMatrix empty;
  EXPECT_EQ(empty.rows(), 0);
  EXPECT_EQ(empty.nbytes(), 0);
}

TEST(QuantizedMatrixTest, OwnsItsBytes) {
  std::mt19937 rng(3);
  std::vector<uint8_t> bytes = RandomRows(GgmlType::kQ4_0, 2, 64, rng);
  const QuantizedMatrix m = QuantizedMatrix::FromBytes(GgmlType::kQ4_0, 2, 64, bytes.data());
  const at::Tensor before = m.Dequantize();
  std::fill(bytes.begin(), bytes.end(), 0xAB);  // the source may go away after construction
  EXPECT_TRUE(at::equal(m.Dequantize(), before));
}

}  // namespace
}  // namespace sift
