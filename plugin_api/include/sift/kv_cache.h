// KV cache: per layer, per KV head keys and values plus the RoPE position of every entry.
//
// Layers may hold different numbers of entries (PyramidKV, SPTS); within a layer every KV head
// holds the same number, but possibly of different tokens (per-head eviction), so positions are
// stored per head. Storage is preallocated so that decode appends are O(1) copies into free
// slots: Reserve() sizes a layer for what is coming, and every allocation (growth, Select, Set)
// keeps `headroom()` free slots beyond it, so a decode of up to that many tokens never copies
// the cache. Select() gathers kept entries into new storage and releases the old buffers.
//
// Layout per layer: k, v are [Hkv, capacity, head_dim] (compute dtype, on the cache's device);
// positions are [Hkv, capacity] int64 and always on the host: they are metadata that attention
// bounds and masks are computed from, so keeping them there means no device read per layer.
// Views returned by Keys()/Values()/Positions() cover [0, size).
//
// A cache owns its storage: it moves but never copies implicitly (a copy of the tensor handles
// would share the storage, so an edit through one cache would show in the other); Clone() is the
// deep copy.
//
// THREADING: not thread-safe; one request owns one cache.
// ERRORS:    shape mismatches throw sift::Error naming the layer.
#ifndef SIFT_KV_CACHE_H_
#define SIFT_KV_CACHE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace sift {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  at::ScalarType dtype = at::kBFloat16;
  at::Device device = at::kCPU;
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  KvCache(KvCache&&) = default;  // the moved-from cache may only be assigned to or destroyed
  KvCache& operator=(KvCache&&) = default;

  // A deep copy: the same shape, headroom, entries and positions in storage of its own (sized
  // like Set: the live entries plus headroom).
  KvCache Clone() const;
  // A deep copy of the first `entries` entries of every layer (each layer must hold at least
  // that many; throws sift::Error otherwise) whose headroom is `headroom`: storage for exactly
  // that many more. For a cached prompt prefix (sift/prefix_cache.h): a full-KV cache holds
  // entry i of every layer for prompt token i.
  KvCache ClonePrefix(int64_t entries, int64_t headroom) const;

  const KvCacheShape& shape() const { return shape_; }
  int64_t num_layers() const { return shape_.num_layers; }
  int64_t size(int64_t layer) const { return layers_[layer].size; }

  // Ensures room for `extra` more entries in `layer` without reallocating on append.
  void Reserve(int64_t layer, int64_t extra);
  // Free slots every later allocation keeps beyond what it needs (e.g. the decode budget).
  void set_headroom(int64_t entries) { headroom_ = entries; }
  int64_t headroom() const { return headroom_; }

  // Appends n entries. k, v: [n, Hkv, hd]; positions: [n] int64 (same for every head; host
  // tensors preferred, device ones are copied over and counted as a host read).
  void Append(int64_t layer, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions);

  // Views of the live entries: [Hkv, size, hd] on the device and [Hkv, size] on the host.
  at::Tensor Keys(int64_t layer) const;
  at::Tensor Values(int64_t layer) const;
  at::Tensor Positions(int64_t layer) const;

  // Keeps only the given entries of `layer`. indices: [Hkv, m] (per head) or [m] (shared by
  // all heads), int64, each in [0, size), on any device (device indices are read on the host
  // once, for the positions). Order is preserved as given (callers pass sorted indices to keep
  // original order). Memory of evicted entries is released.
  void Select(int64_t layer, const at::Tensor& indices);

  // Replaces a layer's content (k, v: [Hkv, n, hd]; positions: [Hkv, n], any device).
  void Set(int64_t layer, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions);

  // Drops every entry of every layer (storage released).
  void Clear();

  // Bytes of the live entries (k + v + positions), and bytes actually allocated.
  int64_t Bytes() const;
  // Bytes one entry of one layer takes, all KV heads together (k + v + positions): Bytes() is
  // this times the live entries summed over layers.
  static int64_t EntryBytes(const KvCacheShape& shape);
  int64_t AllocatedBytes() const;
  // Live entries summed over layers (per head).
  int64_t TotalEntries() const;
  // One past the largest position held in any layer (the next decode position is at least this).
  int64_t NextPosition() const;

 private:
  struct Layer {
    at::Tensor k, v, pos;  // [Hkv, capacity, hd] on the device, [Hkv, capacity] on the host
    int64_t size = 0;
    int64_t capacity() const { return k.defined() ? k.size(1) : 0; }
  };
  void Grow(Layer& layer, int64_t min_capacity);

  KvCacheShape shape_;
  std::vector<Layer> layers_;
  int64_t headroom_ = 0;
};

}  // namespace sift

#endif  // SIFT_KV_CACHE_H_
