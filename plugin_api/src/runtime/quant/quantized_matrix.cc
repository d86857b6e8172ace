// QuantizedMatrix: storage (row segments of one type each), factories, and the products and
// dequantisation, split over rows with at::parallel_for and handed to the kernels of the chosen
// CPU level (cpu_isa.cc).
#include "sift/quantized_matrix.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "kernels.h"
#include "sift/error.h"
#include "sift/gguf.h"

namespace sift {
namespace {

quant::Kernels KernelsFor(CpuIsa isa, GgmlType type) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return quant::Avx512Kernels(type);
    case CpuIsa::kAvx2:
      return quant::Avx2Kernels(type);
    case CpuIsa::kScalar:
      break;
  }
  return quant::ScalarKernels(type);
}

// The int8-activation kernel table of a level; null at the scalar level (which has none).
using Int8Table = quant::DotInt8Fn (*)(GgmlType);
Int8Table Int8TableFor(CpuIsa isa) {
  if (isa == CpuIsa::kScalar) return nullptr;
  if (isa == CpuIsa::kAvx512 && quant::CpuHasAvx512Vnni()) return &quant::Avx512VnniInt8Kernel;
  return &quant::Avx2Int8Kernel;
}

CpuIsa ResolveIsa(const QuantOptions& options) {
  if (!options.isa) return DefaultCpuIsa();
  SIFT_CHECK(*options.isa <= DetectedCpuIsa(), "CPU kernel level ", CpuIsaName(*options.isa),
             " requested, but this CPU supports up to ", CpuIsaName(DetectedCpuIsa()));
  return *options.isa;
}

bool Supported(GgmlType type) { return quant::ScalarKernels(type).dot != nullptr; }

constexpr const char* kSupportedTypes =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, "
    "Q5_K, Q6_K";

// Rows per parallel task: about 32 KiB of weights, so small matrices stay on one thread.
int64_t Grain(int64_t nbytes, int64_t rows) {
  const int64_t row_bytes = std::max<int64_t>(1, nbytes / std::max<int64_t>(1, rows));
  return std::max<int64_t>(1, (int64_t{32} << 10) / row_bytes);
}

}  // namespace

bool PackedInt8Available() {
  return DefaultCpuIsa() == CpuIsa::kAvx512 && quant::CpuHasAvx512Vnni();
}

std::string QuantKernelName(const QuantOptions& options) {
  const CpuIsa isa = ResolveIsa(options);
  if (options.int8_activations && Int8TableFor(isa) != nullptr) {
    return Int8TableFor(isa) == &quant::Avx512VnniInt8Kernel ? "avx512vnni-int8" : "avx2-int8";
  }
  return std::string(CpuIsaName(isa)) + "-fp32";
}

// Collects segments and bytes, then freezes them into a QuantizedMatrix.
class QuantizedMatrix::Builder {
 public:
  Builder(int64_t cols, int64_t reserve_bytes) : cols_(cols) {
    bytes_.reserve(static_cast<size_t>(reserve_bytes));
  }

  // Appends nrows rows of `type` copied from data, merging with the last segment when it matches.
  void Append(GgmlType type, int64_t nrows, const uint8_t* data) {
    if (nrows == 0) return;
    const int64_t row_bytes = static_cast<int64_t>(GgmlRowBytes(type, cols_));
    if (segments_.empty() || segments_.back().type != type) {
      segments_.push_back(
          Segment{type, rows_, rows_, static_cast<int64_t>(bytes_.size()), row_bytes});
    }
    bytes_.insert(bytes_.end(), data, data + nrows * row_bytes);
    rows_ += nrows;
    segments_.back().end = rows_;
  }

  QuantizedMatrix Finish() {
    QuantizedMatrix m;
    m.rows_ = rows_;
    m.cols_ = cols_;
    m.segments_ = std::move(segments_);
    m.bytes_ = at::empty({static_cast<int64_t>(bytes_.size())}, at::kByte);
    if (!bytes_.empty()) std::memcpy(m.bytes_.data_ptr<uint8_t>(), bytes_.data(), bytes_.size());
    return m;
  }

 private:
  int64_t cols_, rows_ = 0;
  std::vector<Segment> segments_;
  std::vector<uint8_t> bytes_;
};

QuantizedMatrix QuantizedMatrix::FromBytes(GgmlType type, int64_t rows, int64_t cols,
                                           const uint8_t* data) {
  SIFT_CHECK(GgmlTypeKnown(static_cast<uint32_t>(type)) && Supported(type),
             "QuantizedMatrix: ggml type ", GgmlTypeName(type),
             " is not supported (supported: ", kSupportedTypes, ")");
  SIFT_CHECK(rows >= 0 && cols > 0 && cols % GgmlBlockSize(type) == 0, "QuantizedMatrix: shape (",
             rows, ", ", cols, ") of ", GgmlTypeName(type), " needs rows >= 0 and cols a positive ",
             "multiple of ", GgmlBlockSize(type));
  SIFT_CHECK(rows == 0 || data != nullptr, "QuantizedMatrix: no data");
  Builder b(cols, rows * static_cast<int64_t>(GgmlRowBytes(type, cols)));
  b.Append(type, rows, data);
  return b.Finish();
}

QuantizedMatrix QuantizedMatrix::FromGguf(const GgufTensorInfo& tensor) {
  SIFT_CHECK(tensor.ne.size() == 2, "tensor '", tensor.name, "': a QuantizedMatrix needs 2 ",
             "dimensions, it has ", tensor.ne.size());
  try {
    QuantizedMatrix m = FromBytes(tensor.type, tensor.ne[1], tensor.ne[0], tensor.data);
    SIFT_CHECK(static_cast<uint64_t>(m.nbytes()) == tensor.nbytes, "size ", tensor.nbytes,
               " bytes does not match its shape (", m.nbytes(), ")");
    return m;
  } catch (const Error& e) {
    throw Error(detail::Concat("tensor '", tensor.name, "': ", e.what()));
  }
}

QuantizedMatrix QuantizedMatrix::FromTensor(const at::Tensor& weight) {
  SIFT_CHECK(weight.dim() == 2 && weight.device().is_cpu(), "QuantizedMatrix::FromTensor needs ",
             "a 2-D CPU tensor, got ", weight.dim(), "-D on ", weight.device());
  GgmlType type;
  switch (weight.scalar_type()) {
    case at::kFloat:
      type = GgmlType::kF32;
      break;
    case at::kBFloat16:
      type = GgmlType::kBF16;
      break;
    case at::kHalf:
      type = GgmlType::kF16;
      break;
    default:
      throw Error(detail::Concat("QuantizedMatrix::FromTensor: dtype ", weight.scalar_type(),
                                 " (supported: float, bfloat16, half)"));
  }
  const at::Tensor w = weight.contiguous();
  return FromBytes(type, w.size(0), w.size(1), static_cast<const uint8_t*>(w.data_ptr()));
}

QuantizedMatrix QuantizedMatrix::ConcatRows(const std::vector<QuantizedMatrix>& parts) {
  SIFT_CHECK(!parts.empty(), "QuantizedMatrix::ConcatRows: no parts");
  int64_t total = 0;
  for (const QuantizedMatrix& p : parts) {
    SIFT_CHECK(p.cols_ == parts[0].cols_, "QuantizedMatrix::ConcatRows: parts have ",
               parts[0].cols_, " and ", p.cols_, " columns");
    total += p.nbytes();
  }
  Builder b(parts[0].cols_, total);
  for (const QuantizedMatrix& p : parts) {
    for (const Segment& s : p.segments_) {
      b.Append(s.type, s.end - s.begin, p.bytes_.data_ptr<uint8_t>() + s.offset);
    }
  }
  return b.Finish();
}

QuantizedMatrix QuantizedMatrix::PermuteRows(const std::vector<int64_t>& order) const {
  SIFT_CHECK(static_cast<int64_t>(order.size()) == rows_,
             "QuantizedMatrix::PermuteRows: ", order.size(), " indices for ", rows_, " rows");
  std::vector<bool> seen(static_cast<size_t>(rows_), false);
  for (int64_t r : order) {
    SIFT_CHECK(r >= 0 && r < rows_ && !seen[static_cast<size_t>(r)],
               "QuantizedMatrix::PermuteRows: not a permutation (index ", r, " out of range or ",
               "repeated)");
    seen[static_cast<size_t>(r)] = true;
  }
  Builder b(cols_, nbytes());
  for (int64_t r : order) b.Append(RowType(r), 1, RowData(r));
  return b.Finish();
}

QuantizedMatrix QuantizedMatrix::PackedForInt8() const {
  QuantizedMatrix m = *this;
  m.packed_ = at::Tensor();
  for (Segment& s : m.segments_) s.packed_offset = -1, s.packed_tiles = 0;
  if (!PackedInt8Available() || cols_ % 32 != 0) return m;
  int64_t total = 0;
  for (Segment& s : m.segments_) {
    const int64_t group_bytes = quant::PackedGroupBytes(s.type);
    s.packed_tiles = group_bytes > 0 ? (s.end - s.begin) / quant::kPackRows : 0;
    if (s.packed_tiles == 0) continue;
    s.packed_offset = total;
    total += s.packed_tiles * (cols_ / 32) * group_bytes;
  }
  if (total == 0) return m;
  m.packed_ = at::empty({total}, at::kByte);
  uint8_t* out = m.packed_.data_ptr<uint8_t>();
  const uint8_t* base = bytes_.data_ptr<uint8_t>();
  for (const Segment& s : m.segments_) {
    if (s.packed_tiles == 0) continue;
    const int64_t tile_bytes = (cols_ / 32) * quant::PackedGroupBytes(s.type);
    at::parallel_for(0, s.packed_tiles, 16, [&](int64_t begin, int64_t end) {
      quant::PackTiles(s.type, base + s.offset + begin * quant::kPackRows * s.row_bytes,
                       s.row_bytes, end - begin, cols_, out + s.packed_offset + begin * tile_bytes);
    });
  }
  return m;
}

const QuantizedMatrix::Segment& QuantizedMatrix::SegmentOf(int64_t row) const {
  SIFT_CHECK(row >= 0 && row < rows_, "QuantizedMatrix: row ", row, " out of range [0, ", rows_,
             ")");
  auto it = std::upper_bound(segments_.begin(), segments_.end(), row,
                             [](int64_t r, const Segment& s) { return r < s.end; });
  return *it;
}

const uint8_t* QuantizedMatrix::RowData(int64_t row) const {
  const Segment& s = SegmentOf(row);
  return bytes_.data_ptr<uint8_t>() + s.offset + (row - s.begin) * s.row_bytes;
}

GgmlType QuantizedMatrix::RowType(int64_t r) const { return SegmentOf(r).type; }

std::string QuantizedMatrix::Describe() const {
  std::ostringstream os;
  for (const Segment& s : segments_) {
    os << (&s == &segments_[0] ? "" : " ") << GgmlTypeName(s.type) << '[' << s.begin << ',' << s.end
       << ')';
  }
  return os.str();
}

void QuantizedMatrix::MatMul(const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
                             const QuantOptions& options) const {
  if (n <= 0 || rows_ == 0) return;
  SIFT_CHECK(ldx >= cols_ && ldy >= rows_, "QuantizedMatrix::MatMul: strides ", ldx, ", ", ldy,
             " below the row lengths ", cols_, ", ", rows_);
  const CpuIsa isa = ResolveIsa(options);
  const Int8Table int8 = options.int8_activations && cols_ % 32 == 0 ? Int8TableFor(isa) : nullptr;
  quant::Int8Activations act;
  if (int8 != nullptr) {
    // Quantised once per call on the calling thread, into buffers that only grow.
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> d, sum;
    q.resize(static_cast<size_t>(n * cols_));
    d.resize(static_cast<size_t>(cols_ / 32 * n + 8));
    sum.resize(static_cast<size_t>(cols_ / 16 * n + 8));
    quant::QuantizeActivations(x, n, ldx, cols_, n, q.data(), d.data(), sum.data());
    act = quant::Int8Activations{q.data(), d.data(), sum.data(), cols_, n};
  }
  const uint8_t* base = bytes_.data_ptr<uint8_t>();
  // Rows [lo, hi) of segment s by its blocks.
  auto by_blocks = [&](const Segment& s, int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    const uint8_t* rows = base + s.offset + (lo - s.begin) * s.row_bytes;
    if (const quant::DotInt8Fn dot8 = int8 != nullptr ? int8(s.type) : nullptr) {
      dot8(rows, s.row_bytes, hi - lo, cols_, act, n, y + lo, ldy);
    } else {
      KernelsFor(isa, s.type).dot(rows, s.row_bytes, hi - lo, cols_, x, n, ldx, y + lo, ldy);
    }
  };
  // The packed rows (PackedForInt8) serve the int8 product at the avx512 level; parallel chunks
  // are then whole tiles of kPackRows rows, so that a tile is never split between threads.
  const bool packed =
      packed_.defined() && int8 == &quant::Avx512VnniInt8Kernel && isa == CpuIsa::kAvx512;
  const int64_t unit = packed ? quant::kPackRows : 1;
  const int64_t units = (rows_ + unit - 1) / unit;
  const int64_t grain = std::max<int64_t>(1, Grain(nbytes(), rows_) / unit);
  at::parallel_for(0, units, grain, [&](int64_t ubegin, int64_t uend) {
    const int64_t begin = ubegin * unit, end = std::min(rows_, uend * unit);
    for (const Segment& s : segments_) {
      const int64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
      if (lo >= hi) continue;
      const quant::PackedDotFn dotp =
          packed && s.packed_tiles > 0 ? quant::Avx512VnniPackedKernel(s.type) : nullptr;
      if (dotp == nullptr) {
        by_blocks(s, lo, hi);
        continue;
      }
      // Whole packed tiles inside [lo, hi); the rows around them by their blocks.
      const int64_t k = quant::kPackRows;
      const int64_t t0 = std::min(s.packed_tiles, (lo - s.begin + k - 1) / k);
      const int64_t t1 = std::max(t0, std::min(s.packed_tiles, (hi - s.begin) / k));
      const int64_t plo = s.begin + t0 * k, phi = s.begin + t1 * k;
      if (t1 == t0) {
        by_blocks(s, lo, hi);
        continue;
      }
      by_blocks(s, lo, plo);
      const int64_t tile_bytes = (cols_ / 32) * quant::PackedGroupBytes(s.type);
      dotp(packed_.data_ptr<uint8_t>() + s.packed_offset + t0 * tile_bytes, t1 - t0, cols_, act, n,
           y + plo, ldy);
      by_blocks(s, phi, hi);
    }
  });
}

void QuantizedMatrix::MatMulOut(const at::Tensor& x, at::Tensor& out,
                                const QuantOptions& options) const {
  SIFT_CHECK(x.dim() == 2 && x.size(1) == cols_ && x.device().is_cpu(),
             "QuantizedMatrix::MatMul: x must be a CPU (n, ", cols_, ") tensor, got ", x.sizes(),
             " on ", x.device());
  const int64_t n = x.size(0);
  SIFT_CHECK(out.scalar_type() == at::kFloat && out.dim() == 2 && out.size(0) == n &&
                 out.size(1) == rows_ && (n <= 1 || out.stride(1) == 1) && out.device().is_cpu(),
             "QuantizedMatrix::MatMulOut: out must be a float CPU (", n, ", ", rows_,
             ") tensor with unit column stride, got ", out.scalar_type(), " ", out.sizes(),
             " strides ", out.strides());
  // Rows with unit column stride are used in place (a view into a wider buffer is fine).
  const at::Tensor xf =
      x.scalar_type() == at::kFloat && x.stride(1) == 1 ? x : x.to(at::kFloat).contiguous();
  MatMul(xf.data_ptr<float>(), n, n > 1 ? xf.stride(0) : cols_, out.data_ptr<float>(),
         n > 1 ? out.stride(0) : rows_, options);
}

at::Tensor QuantizedMatrix::MatMul(const at::Tensor& x, const QuantOptions& options) const {
  at::Tensor out = at::empty({x.dim() == 2 ? x.size(0) : 0, rows_}, at::kFloat);
  MatMulOut(x, out, options);
  return out;
}

namespace {

// Dequantises the given rows (row_of(i) for i in [0, count)) into out (count, cols) of dtype.
template <typename RowOf>
at::Tensor DequantizeInto(int64_t count, int64_t cols, at::ScalarType dtype, CpuIsa isa,
                          const RowOf& row_of) {
  SIFT_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
             "QuantizedMatrix::Dequantize: dtype ", dtype, " (supported: float, bfloat16, half)");
  at::Tensor out = at::empty({count, cols}, dtype);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    if (dtype == at::kFloat) {
      for (int64_t i = begin; i < end; ++i) {
        const auto [type, data] = row_of(i);
        KernelsFor(isa, type).dequant(data, cols, out.data_ptr<float>() + i * cols);
      }
      return;
    }
    // Other dtypes: a chunk of rows in float, then LibTorch's vectorised rounding conversion.
    thread_local std::vector<float> buf;
    constexpr int64_t kChunk = 32;
    buf.resize(static_cast<size_t>(kChunk * cols));
    for (int64_t i0 = begin; i0 < end; i0 += kChunk) {
      const int64_t rows = std::min(kChunk, end - i0);
      for (int64_t i = i0; i < i0 + rows; ++i) {
        const auto [type, data] = row_of(i);
        KernelsFor(isa, type).dequant(data, cols, buf.data() + (i - i0) * cols);
      }
      out.narrow(0, i0, rows).copy_(at::from_blob(buf.data(), {rows, cols}, at::kFloat));
    }
  });
  return out;
}

}  // namespace

at::Tensor QuantizedMatrix::Dequantize(at::ScalarType dtype, const QuantOptions& options) const {
  return DequantizeInto(rows_, cols_, dtype, ResolveIsa(options), [this](int64_t r) {
    return std::pair<GgmlType, const uint8_t*>(RowType(r), RowData(r));
  });
}

at::Tensor QuantizedMatrix::DequantizeRows(const at::Tensor& ids, at::ScalarType dtype,
                                           const QuantOptions& options) const {
  SIFT_CHECK(ids.dim() == 1 && !at::isFloatingType(ids.scalar_type()),
             "QuantizedMatrix::DequantizeRows: ids must be a 1-D integer tensor, got ",
             ids.scalar_type(), " ", ids.sizes());
  const at::Tensor idx = ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    SIFT_CHECK(p[i] >= 0 && p[i] < rows_, "QuantizedMatrix::DequantizeRows: id ", p[i],
               " out of range [0, ", rows_, ")");
  }
  return DequantizeInto(idx.numel(), cols_, dtype, ResolveIsa(options), [this, p](int64_t i) {
    return std::pair<GgmlType, const uint8_t*>(RowType(p[i]), RowData(p[i]));
  });
}

std::vector<int64_t> LlamaQkRowOrder(int64_t n_heads, int64_t head_dim) {
  SIFT_CHECK(n_heads > 0 && head_dim > 0 && head_dim % 2 == 0, "LlamaQkRowOrder: ", n_heads,
             " heads of dimension ", head_dim, " (needs an even head dimension)");
  // HF row (h, j, i), j < 2, i < head_dim / 2, is GGUF row (h, i, j).
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n_heads * head_dim));
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) order.push_back(h * head_dim + i * 2 + j);
    }
  }
  return order;
}

}  // namespace sift
