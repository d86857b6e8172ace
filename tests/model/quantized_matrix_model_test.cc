// Every 2-D tensor of the real model file ($SIFT_MODEL; skipped when unset) as a QuantizedMatrix:
// its dequantised rows equal DequantizeRow's bit for bit, and its products (n = 1 and n = 3, at
// every kernel level this CPU has) equal the product with those rows within the fp32 summation
// bound of tests/unit/quantized_matrix_test.cc. Also prints the int8-activation error against
// the fp32 path per tensor (an accuracy record, checked against the activation-rounding bound),
// and checks the packed rows of the AVX-512 VNNI kernel against the blocks' int8 product.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sift/ggml_types.h"
#include "sift/gguf.h"
#include "sift/quantized_matrix.h"
#include "support/model_path.h"

namespace sift {
namespace {

using ::sift::testing::ModelPath;

std::vector<CpuIsa> Levels() {
  std::vector<CpuIsa> levels;
  for (int i = 0; i <= static_cast<int>(DetectedCpuIsa()); ++i) {
    levels.push_back(static_cast<CpuIsa>(i));
  }
  return levels;
}

TEST(QuantizedMatrixModelTest, EveryMatrixOfTheModelMatchesItsDequantizedRows) {
  SIFT_SKIP_WITHOUT_MODEL();
  const std::unique_ptr<GgufFile> file = GgufFile::Open(ModelPath());
  at::manual_seed(0);
  int checked = 0;
  for (const GgufTensorInfo& t : file->tensors()) {
    if (t.ne.size() != 2) continue;
    SCOPED_TRACE(t.name + " " + GgmlTypeName(t.type));
    const QuantizedMatrix m = QuantizedMatrix::FromGguf(t);
    const int64_t rows = t.ne[1], cols = t.ne[0];
    ASSERT_EQ(m.rows(), rows);
    ASSERT_EQ(m.nbytes(), static_cast<int64_t>(t.nbytes));
    // The reference: DequantizeRow over the file's bytes.
    at::Tensor w = at::empty({rows, cols}, at::kFloat);
    const uint64_t row_bytes = GgmlRowBytes(t.type, cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t.type, t.data + r * row_bytes, w.data_ptr<float>() + r * cols, cols);
    }
    const at::Tensor x = at::randn({3, cols});
    const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble));
    const at::Tensor magnitude = at::linear(x.abs().to(at::kDouble), w.abs().to(at::kDouble));
    const double k = static_cast<double>(cols) / 8 + 64;
    for (CpuIsa isa : Levels()) {
      QuantOptions options;
      options.isa = isa;
      // Dequantised values compare equal (==, so a zero's sign does not matter).
      EXPECT_TRUE(at::equal(m.Dequantize(at::kFloat, options) == w, at::ones_like(w, at::kBool)))
          << CpuIsaName(isa);
      for (int64_t n : {1, 3}) {
        const at::Tensor y = m.MatMul(x.narrow(0, 0, n), options).to(at::kDouble);
        const at::Tensor err = (y - exact.narrow(0, 0, n)).abs();
        const at::Tensor tol = magnitude.narrow(0, 0, n) * (k * std::ldexp(1.0, -24));
        EXPECT_TRUE(at::all(err <= tol).item<bool>())
            << CpuIsaName(isa) << " n " << n << ": worst error / bound "
            << (err / tol).max().item<double>();
      }
      if (cols % 32 != 0) continue;
      // int8 activations: within the activation-rounding bound (see the unit test).
      options.int8_activations = true;
      const at::Tensor y8 = m.MatMul(x, options).to(at::kDouble);
      const at::Tensor amax =
          std::get<0>(x.abs().view({3, cols / 32, 32}).max(2)).repeat_interleave(32, 1);
      const at::Tensor bound =
          at::linear(amax.to(at::kDouble) / 254, w.abs().to(at::kDouble)) * 1.001 +
          magnitude * 1e-4;
      const at::Tensor err8 = (y8 - exact).abs();
      EXPECT_TRUE(at::all(err8 <= bound).item<bool>())
          << QuantKernelName(options) << ": worst error / bound "
          << (err8 / bound).max().item<double>();
      if (isa == DetectedCpuIsa()) {
        std::printf("%-28s %-5s %-16s int8 vs exact: max |err| / sum|w x| = %.2e\n", t.name.c_str(),
                    GgmlTypeName(t.type), QuantKernelName(options).c_str(),
                    (err8 / magnitude).max().item<double>());
        // The packed rows (where this CPU packs them): the blocks' int8 product up to fp32
        // summation order (tests/unit/quantized_matrix_test.cc,
        // PackedRowsGiveTheBlocksInt8Product).
        const QuantizedMatrix packed = m.PackedForInt8();
        if (packed.packed_nbytes() > 0) {
          const at::Tensor yp = packed.MatMul(x, options).to(at::kDouble);
          EXPECT_TRUE(at::all((yp - y8).abs() <= magnitude * 1e-5).item<bool>())
              << "packed: worst |packed - blocks| / sum|w x| "
              << ((yp - y8).abs() / magnitude).max().item<double>();
        }
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace sift
