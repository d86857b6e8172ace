#include "sift/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "sift/error.h"
#include "sift/host.h"
#include "tensor_util.h"

namespace sift {
namespace {

// Positions live on the host; a device tensor is brought over (and counted as a host read).
at::Tensor HostLong(const at::Tensor& t) {
  return t.is_cpu() ? Contiguous(AsType(t, at::kLong)) : ToHost(AsType(t, at::kLong));
}

// dst[h, at + i, :] = src[i, h, :] for CPU tensors whose head rows are contiguous, src fp32 or of
// dst's dtype (fp32 to bf16 rounds to nearest even, as copy_ does). Returns false, having done
// nothing, for anything else. A decode step appends one row per request and layer; this keeps
// the operators and their dispatch out of that loop.
bool CopyRowsOnHost(const at::Tensor& src, const at::Tensor& dst, int64_t at) {
  if (!src.is_cpu() || !dst.is_cpu() || src.stride(2) != 1 || dst.stride(2) != 1) return false;
  const at::ScalarType from = src.scalar_type(), to = dst.scalar_type();
  if (!(from == to && (from == at::kFloat || from == at::kBFloat16)) &&
      !(from == at::kFloat && to == at::kBFloat16)) {
    return false;
  }
  const int64_t n = src.size(0), heads = src.size(1), hd = src.size(2);
  const size_t elem = src.element_size();
  const auto* s = static_cast<const uint8_t*>(src.data_ptr());  // host: checked above
  auto* d = static_cast<uint8_t*>(dst.data_ptr());              // host: checked above
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const uint8_t* row = s + (i * src.stride(0) + h * src.stride(1)) * elem;
      uint8_t* out = d + (h * dst.stride(0) + (at + i) * dst.stride(1)) * dst.element_size();
      if (from == to) {
        std::memcpy(out, row, hd * elem);
      } else {
        const float* f = reinterpret_cast<const float*>(row);
        auto* b = reinterpret_cast<c10::BFloat16*>(out);
        for (int64_t e = 0; e < hd; ++e) b[e] = c10::BFloat16(f[e]);
      }
    }
  }
  return true;
}

}  // namespace

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape), layers_(shape.num_layers) {
  SIFT_CHECK(shape.num_layers > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0,
             "KvCache: invalid shape");
}

KvCache KvCache::Clone() const {
  KvCache c(shape_);
  c.headroom_ = headroom_;
  for (int64_t l = 0; l < num_layers(); ++l) {
    if (layers_[l].size > 0) c.Set(l, Keys(l), Values(l), Positions(l));  // Set copies
  }
  return c;
}

KvCache KvCache::ClonePrefix(int64_t entries, int64_t headroom) const {
  KvCache c(shape_);
  c.headroom_ = std::max<int64_t>(0, headroom);
  if (entries <= 0) return c;
  for (int64_t l = 0; l < num_layers(); ++l) {
    const Layer& from = layers_[l];
    if (from.size < entries) {
      throw Error("KvCache::ClonePrefix: layer " + std::to_string(l) + " holds " +
                  std::to_string(from.size) + " entries, fewer than " + std::to_string(entries));
    }
    Layer& to = c.layers_[l];
    c.Grow(to, entries);
    to.k.narrow(1, 0, entries).copy_(from.k.narrow(1, 0, entries));
    to.v.narrow(1, 0, entries).copy_(from.v.narrow(1, 0, entries));
    to.pos.narrow(1, 0, entries).copy_(from.pos.narrow(1, 0, entries));
    to.size = entries;
  }
  return c;
}

void KvCache::Grow(Layer& layer, int64_t min_capacity) {
  int64_t capacity = std::max<int64_t>({min_capacity + headroom_, 2 * layer.capacity(), 64});
  auto opts = at::TensorOptions().dtype(shape_.dtype).device(shape_.device);
  at::Tensor k = at::empty({shape_.num_kv_heads, capacity, shape_.head_dim}, opts);
  at::Tensor v = at::empty({shape_.num_kv_heads, capacity, shape_.head_dim}, opts);
  at::Tensor pos = at::empty({shape_.num_kv_heads, capacity}, at::kLong);  // host: positions
  if (layer.size > 0) {
    k.narrow(1, 0, layer.size).copy_(layer.k.narrow(1, 0, layer.size));
    v.narrow(1, 0, layer.size).copy_(layer.v.narrow(1, 0, layer.size));
    pos.narrow(1, 0, layer.size).copy_(layer.pos.narrow(1, 0, layer.size));
  }
  layer.k = k;
  layer.v = v;
  layer.pos = pos;
}

void KvCache::Reserve(int64_t layer, int64_t extra) {
  Layer& l = layers_.at(layer);
  if (l.size + extra > l.capacity()) Grow(l, l.size + extra);
}

void KvCache::Append(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& positions) {
  Layer& l = layers_.at(layer);
  const int64_t n = k.size(0);
  SIFT_CHECK(k.dim() == 3 && k.size(1) == shape_.num_kv_heads && k.size(2) == shape_.head_dim &&
                 v.sizes() == k.sizes() && positions.dim() == 1 && positions.size(0) == n,
             "KvCache::Append: layer ", layer, ": expected k, v [n, ", shape_.num_kv_heads, ", ",
             shape_.head_dim, "] and positions [n], got k ", k.sizes(), " v ", v.sizes(),
             " positions ", positions.sizes());
  if (l.size + n > l.capacity()) Grow(l, l.size + n);
  if (!CopyRowsOnHost(k, l.k, l.size) || !CopyRowsOnHost(v, l.v, l.size)) {
    l.k.narrow(1, l.size, n).copy_(k.transpose(0, 1));
    l.v.narrow(1, l.size, n).copy_(v.transpose(0, 1));
  }
  // Host to host: the same n positions for every head.
  const at::Tensor pos = HostLong(positions);
  const int64_t* src = pos.data_ptr<int64_t>();  // host: positions
  int64_t* dst = l.pos.data_ptr<int64_t>();      // host: positions
  for (int64_t h = 0; h < shape_.num_kv_heads; ++h) {
    std::copy(src, src + n, dst + h * l.capacity() + l.size);
  }
  l.size += n;
}

at::Tensor KvCache::Keys(int64_t layer) const {
  const Layer& l = layers_.at(layer);
  if (!l.k.defined()) {
    return at::empty({shape_.num_kv_heads, 0, shape_.head_dim},
                     at::TensorOptions().dtype(shape_.dtype).device(shape_.device));
  }
  return l.k.narrow(1, 0, l.size);
}

at::Tensor KvCache::Values(int64_t layer) const {
  const Layer& l = layers_.at(layer);
  if (!l.v.defined()) return Keys(layer);
  return l.v.narrow(1, 0, l.size);
}

at::Tensor KvCache::Positions(int64_t layer) const {
  const Layer& l = layers_.at(layer);
  if (!l.pos.defined()) return at::empty({shape_.num_kv_heads, 0}, at::kLong);  // host: positions
  return l.pos.narrow(1, 0, l.size);
}

void KvCache::Select(int64_t layer, const at::Tensor& indices) {
  Layer& l = layers_.at(layer);
  at::Tensor idx = HostLong(indices);
  if (idx.dim() == 1) idx = idx.unsqueeze(0).expand({shape_.num_kv_heads, idx.size(0)});
  SIFT_CHECK(idx.dim() == 2 && idx.size(0) == shape_.num_kv_heads, "KvCache::Select: layer ", layer,
             ": indices must be [m] or [", shape_.num_kv_heads, ", m], got ", indices.sizes());
  const int64_t m = idx.size(1);
  if (idx.numel() > 0) {
    const at::Tensor flat = idx.contiguous();
    const int64_t* p = flat.data_ptr<int64_t>();  // host: HostLong'd indices
    const auto [lo, hi] = std::minmax_element(p, p + flat.numel());
    SIFT_CHECK(*lo >= 0 && *hi < l.size, "KvCache::Select: layer ", layer,
               ": index out of range [0, ", l.size, ")");
  }
  // New storage with headroom; the old buffers are dropped when assigned over.
  const int64_t capacity = m + headroom_;
  auto opts = at::TensorOptions().dtype(shape_.dtype).device(shape_.device);
  at::Tensor k = at::empty({shape_.num_kv_heads, capacity, shape_.head_dim}, opts);
  at::Tensor v = at::empty({shape_.num_kv_heads, capacity, shape_.head_dim}, opts);
  at::Tensor pos = at::empty({shape_.num_kv_heads, capacity}, at::kLong);  // host: positions
  if (m > 0) {
    const at::Tensor didx =
        indices.device() == shape_.device ? indices.to(at::kLong) : idx.to(shape_.device);
    at::Tensor dev_idx =
        didx.dim() == 1 ? didx.unsqueeze(0).expand({shape_.num_kv_heads, m}) : didx;
    at::Tensor kidx = dev_idx.unsqueeze(-1).expand({shape_.num_kv_heads, m, shape_.head_dim});
    at::Tensor k_live = k.narrow(1, 0, m), v_live = v.narrow(1, 0, m), p_live = pos.narrow(1, 0, m);
    at::gather_out(k_live, Keys(layer), 1, kidx);
    at::gather_out(v_live, Values(layer), 1, kidx);
    at::gather_out(p_live, Positions(layer), 1, idx);
  }
  l.k = k;
  l.v = v;
  l.pos = pos;
  l.size = m;
}

void KvCache::Set(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& positions) {
  Layer& l = layers_.at(layer);
  SIFT_CHECK(k.dim() == 3 && k.size(0) == shape_.num_kv_heads && k.size(2) == shape_.head_dim &&
                 v.sizes() == k.sizes() && positions.dim() == 2 && positions.size(0) == k.size(0) &&
                 positions.size(1) == k.size(1),
             "KvCache::Set: layer ", layer, ": bad shapes k ", k.sizes(), " v ", v.sizes(),
             " positions ", positions.sizes());
  const int64_t n = k.size(1);
  l = Layer{};
  Grow(l, n);  // empty layer: allocates n + headroom
  l.k.narrow(1, 0, n).copy_(k);
  l.v.narrow(1, 0, n).copy_(v);
  l.pos.narrow(1, 0, n).copy_(HostLong(positions));
  l.size = n;
}

void KvCache::Clear() {
  for (Layer& l : layers_) l = Layer{};
}

int64_t KvCache::EntryBytes(const KvCacheShape& shape) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(shape.dtype));
  return shape.num_kv_heads * (2 * shape.head_dim * elem + 8);
}

int64_t KvCache::Bytes() const { return TotalEntries() * EntryBytes(shape_); }

int64_t KvCache::AllocatedBytes() const {
  int64_t total = 0;
  for (const Layer& l : layers_) {
    if (!l.k.defined()) continue;
    total += l.k.nbytes() + l.v.nbytes() + l.pos.nbytes();
  }
  return total;
}

int64_t KvCache::TotalEntries() const {
  int64_t total = 0;
  for (const Layer& l : layers_) total += l.size;
  return total;
}

int64_t KvCache::NextPosition() const {
  int64_t next = 0;
  for (const Layer& l : layers_) {
    if (l.size == 0) continue;
    const at::Tensor p = l.pos.narrow(1, 0, l.size).contiguous();
    const int64_t* d = p.data_ptr<int64_t>();  // host: positions
    next = std::max(next, *std::max_element(d, d + p.numel()) + 1);
  }
  return next;
}

}  // namespace sift
