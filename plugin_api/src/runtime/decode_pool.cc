#include "sift/decode_pool.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "sift/error.h"
#include "sift/host.h"

// CUDA graphs and the flash varlen kernel with `seqused_k` (LibTorch >= 2.5), in builds against
// a LibTorch with CUDA (CMake defines SIFT_CUDA; tools/check_torch2.py compiles this branch).
#if defined(SIFT_CUDA) && __has_include(<ATen/cuda/CUDAGraph.h>) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
#define SIFT_DECODE_GRAPHS 1
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace sift {
namespace {

// Entry 0 of every layer is no request's: padding rows (a step of 5 rows runs the 8-row graph)
// write their k/v there and attend to it alone.
constexpr int64_t kScratchEntries = 1;
constexpr int64_t kMinEntries = 4096;

int64_t NextPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

bool FlashDtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// The staged inputs of a step, for staged_rows_ = S rows and L layers, in one int64 buffer (host,
// pinned on CUDA, and its device copy):
//   [0, S)                        token ids
//   [S, 2S)                       positions
//   OffsetsAt(l) = 2S + l(S + 1)  per layer: each row's region offset in that layer's pool, then
//                                 the pool's end (cu_seqlens_k)
//   UsedAt(l) = 2S + L(S+1) + lS  per layer, per row: the entries the row attends to after this
//                                 step's append (seqused_k); the append goes to offset + that - 1
// A bucket of R <= S rows reads the first R of each part (and offsets' R-th entry is row R's or
// the end: flash reads rows' lengths from seqused_k, not from neighbouring offsets).
int64_t OffsetsAt(int64_t s, int64_t layer) { return 2 * s + layer * (s + 1); }
int64_t UsedAt(int64_t s, int64_t layers, int64_t layer) {
  return 2 * s + layers * (s + 1) + layer * s;
}
int64_t StagedSize(int64_t s, int64_t layers) { return UsedAt(s, layers, layers); }

}  // namespace

struct DecodePool::Graphs {
#ifdef SIFT_DECODE_GRAPHS
  struct Captured {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    at::Tensor logits;  // in the graph's private pool: written by every replay
  };
  std::map<std::pair<int64_t, int64_t>, Captured> by_bucket;  // (rows, max keys) -> graph
#endif
  bool broken = false;  // a capture failed: eager from then on
  int64_t size() const {
#ifdef SIFT_DECODE_GRAPHS
    return static_cast<int64_t>(by_bucket.size());
#else
    return 0;
#endif
  }
  void Clear() {
#ifdef SIFT_DECODE_GRAPHS
    by_bucket.clear();
#endif
  }
};

std::string DecodePool::Unsupported(const Model& model) {
  if (model.native_weights() && model.options().cpu_kernels) {
    return "native weights with the CPU kernels decode on their host path (Model::DecodeStep)";
  }
  return "";
}

bool DecodePool::GraphsAvailable(const Model& model, std::string* why) {
  std::string reason;
#ifndef SIFT_DECODE_GRAPHS
  reason = "built without CUDA graphs (needs LibTorch >= 2.5 with CUDA)";
#else
  if (!model.options().device.is_cuda()) {
    reason = "the model is not on a CUDA device";
  } else if (!Unsupported(model).empty()) {
    reason = Unsupported(model);
  }
#endif
  (void)model;
  if (why != nullptr) *why = reason;
  return reason.empty();
}

bool DecodePool::Wanted(const Model& model, DecodePoolMode mode, std::string* why) {
  std::string reason = Unsupported(model);
  if (reason.empty() && mode == DecodePoolMode::kOff) reason = "decode pool off";
  if (reason.empty() && mode == DecodePoolMode::kAuto) GraphsAvailable(model, &reason);
  if (why != nullptr) *why = reason;
  return reason.empty();
}

bool ParseDecodePoolMode(const std::string& text, DecodePoolMode* mode) {
  if (text == "auto") {
    *mode = DecodePoolMode::kAuto;
  } else if (text == "on") {
    *mode = DecodePoolMode::kOn;
  } else if (text == "off") {
    *mode = DecodePoolMode::kOff;
  } else {
    return false;
  }
  return true;
}

DecodePool::DecodePool(const Model& model, DecodePoolOptions options)
    : model_(model),
      options_(options),
      layers_(model.config().num_layers),
      pools_(static_cast<size_t>(model.config().num_layers)),
      graphs_(std::make_unique<Graphs>()) {
  const std::string unsupported = Unsupported(model);
  SIFT_CHECK(unsupported.empty(), "DecodePool: ", unsupported);
  std::string why;
  const bool graphs = GraphsAvailable(model, &why);
  if (!options_.graphs) why = "graphs turned off";
  eager_why_ = graphs && options_.graphs ? "" : why;
  const KvCacheShape shape = model.CacheShape();
  flash_ = graphs && FlashDtype(shape.dtype) && shape.head_dim % 8 == 0 && shape.head_dim <= 256;
  // RoPE rows of every position a request may reach, computed once by the model's own rule (so
  // the step's rows equal Model::Rope's) and gathered on the device by the staged positions.
  const int64_t positions = std::max<int64_t>(1, model.config().context_length);
  const RopeTables table = model.Rope(at::arange(positions, at::kLong));  // host: positions
  rope_cos_ = table.cos;
  rope_sin_ = table.sin;
}

DecodePool::~DecodePool() = default;

int64_t DecodePool::graphs_captured() const { return graphs_->size(); }

int64_t DecodePool::capacity(int64_t layer) const {
  SIFT_CHECK(layer >= 0 && layer < layers_, "DecodePool::capacity: no layer ", layer);
  return pools_[static_cast<size_t>(layer)].capacity;
}

int64_t DecodePool::in_use(int64_t layer) const {
  SIFT_CHECK(layer >= 0 && layer < layers_, "DecodePool::in_use: no layer ", layer);
  const LayerPool& pool = pools_[static_cast<size_t>(layer)];
  int64_t free = 0;
  for (const auto& [offset, count] : pool.free) free += count;
  return pool.capacity == 0 ? 0 : pool.capacity - kScratchEntries - free;
}

std::string DecodePool::Describe() const {
  if (eager_why_.empty() && !graphs_->broken) {
    return std::string("cuda graphs (") + std::to_string(graphs_->size()) +
           " captured, attention " + (flash_ ? "flash varlen" : "gathered") + ")";
  }
  return "eager (" + (graphs_->broken ? std::string("a capture failed") : eager_why_) + ")";
}

void DecodePool::Grow(int64_t layer, int64_t min_capacity) {
  LayerPool& pool = pools_[static_cast<size_t>(layer)];
  const KvCacheShape shape = model_.CacheShape();
  const int64_t least = options_.initial_entries > 0 ? options_.initial_entries : kMinEntries;
  const int64_t capacity = std::max({min_capacity, 2 * pool.capacity, least});
  const at::TensorOptions opts = at::TensorOptions().dtype(shape.dtype).device(shape.device);
  at::Tensor k = at::zeros({capacity, shape.num_kv_heads, shape.head_dim}, opts);
  at::Tensor v = at::zeros({capacity, shape.num_kv_heads, shape.head_dim}, opts);
  if (pool.capacity > 0) {  // regions keep their offsets
    k.narrow(0, 0, pool.capacity).copy_(pool.k);
    v.narrow(0, 0, pool.capacity).copy_(pool.v);
  }
  pool.k = std::move(k);
  pool.v = std::move(v);
  const int64_t before = pool.capacity;
  pool.capacity = capacity;
  if (before == 0) {
    pool.free[kScratchEntries] = capacity - kScratchEntries;
  } else {
    Free(layer, before, capacity - before);
  }
  graphs_->Clear();  // they read the old tensors' addresses
}

int64_t DecodePool::Allocate(int64_t layer, int64_t entries) {
  LayerPool& pool = pools_[static_cast<size_t>(layer)];
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto it = pool.free.begin(); it != pool.free.end(); ++it) {  // first fit
      if (it->second < entries) continue;
      const int64_t offset = it->first, left = it->second - entries;
      pool.free.erase(it);
      if (left > 0) pool.free[offset + entries] = left;
      return offset;
    }
    Grow(layer, pool.capacity + entries + kScratchEntries);
  }
  throw Error("DecodePool: no room for " + std::to_string(entries) + " entries in layer " +
              std::to_string(layer));
}

void DecodePool::Free(int64_t layer, int64_t offset, int64_t entries) {
  std::map<int64_t, int64_t>& free = pools_[static_cast<size_t>(layer)].free;
  auto next = free.lower_bound(offset);
  if (next != free.end() && next->first == offset + entries) {  // merge with the one after
    entries += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {  // and with the one before
      prev->second += entries;
      return;
    }
  }
  free[offset] = entries;
}

void DecodePool::Admit(KvCache& cache, int64_t max_new_tokens) {
  SIFT_CHECK(!Holds(cache), "DecodePool: the cache is admitted already");
  SIFT_CHECK(cache.num_layers() == layers_, "DecodePool: the cache has ", cache.num_layers(),
             " layers, the model ", layers_);
  Region r;
  for (int64_t l = 0; l < layers_; ++l) {
    r.admitted.push_back(cache.size(l));
    r.admitted_positions.push_back(cache.Positions(l).clone());  // host: [Hkv, n]
  }
  r.size = r.admitted;
  try {
    for (int64_t l = 0; l < layers_; ++l) {  // each layer as long as it is, plus the new tokens
      const size_t i = static_cast<size_t>(l);
      r.capacity.push_back(r.admitted[i] + std::max<int64_t>(1, max_new_tokens));
      r.offset.push_back(Allocate(l, r.capacity[i]));
      const int64_t n = r.admitted[i];
      if (n == 0) continue;
      LayerPool& pool = pools_[i];
      pool.k.narrow(0, r.offset[i], n).copy_(cache.Keys(l).transpose(0, 1));  // [Hkv, n, hd]
      pool.v.narrow(0, r.offset[i], n).copy_(cache.Values(l).transpose(0, 1));
    }
  } catch (...) {  // the cache is untouched; the regions go back
    for (size_t i = 0; i < r.offset.size(); ++i) {
      Free(static_cast<int64_t>(i), r.offset[i], r.capacity[i]);
    }
    throw;
  }
  cache.Clear();  // its entries live in the pool until Release: the KV is held once
  regions_.emplace(&cache, std::move(r));
}

void DecodePool::Release(KvCache& cache) {
  auto it = regions_.find(&cache);
  if (it == regions_.end()) return;
  Region r = std::move(it->second);
  regions_.erase(it);
  const int64_t decoded = static_cast<int64_t>(r.positions.size());
  const at::Tensor decoded_positions = at::tensor(r.positions, at::kLong);  // host: positions
  for (int64_t l = 0; l < layers_; ++l) {
    const size_t i = static_cast<size_t>(l);
    Free(l, r.offset[i], r.capacity[i]);
    const int64_t n = r.size[i];
    if (n == 0) continue;
    const at::Tensor& before = r.admitted_positions[i];  // [Hkv, admitted]
    const at::Tensor positions =
        decoded == 0
            ? before
            : at::cat({before, decoded_positions.unsqueeze(0).expand({before.size(0), decoded})},
                      1);
    const LayerPool& pool = pools_[i];
    cache.Set(l, pool.k.narrow(0, r.offset[i], n).transpose(0, 1),
              pool.v.narrow(0, r.offset[i], n).transpose(0, 1), positions);
  }
}

at::Tensor DecodePool::Step(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                            const std::vector<KvCache*>& caches) {
  const int64_t n = static_cast<int64_t>(ids.size());
  SIFT_CHECK(n > 0 && positions.size() == ids.size() && caches.size() == ids.size(),
             "DecodePool::Step: ", ids.size(), " ids, ", positions.size(), " positions and ",
             caches.size(), " caches (need the same number, at least one)");
  const int64_t rows = NextPowerOfTwo(n);
  std::vector<Region*> regions;
  const int64_t max_keys = Stage(ids, positions, caches, rows, &regions);
  at::Tensor logits = Replay(rows, max_keys);
  if (!logits.defined()) logits = Compute(rows, max_keys);
  for (int64_t i = 0; i < n; ++i) {
    Region& r = *regions[static_cast<size_t>(i)];
    for (int64_t& size : r.size) ++size;
    r.positions.push_back(positions[static_cast<size_t>(i)]);
  }
  return logits.narrow(0, 0, n);
}

int64_t DecodePool::Stage(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                          const std::vector<KvCache*>& caches, int64_t rows,
                          std::vector<Region*>* regions) {
  if (rows > staged_rows_) {  // new staging buffers: graphs read the old ones
    staged_rows_ = rows;
    const int64_t size = StagedSize(rows, layers_);
    const bool cuda = model_.options().device.is_cuda();
    staged_host_ = at::empty(
        {size}, at::TensorOptions().dtype(at::kLong).pinned_memory(cuda));  // host: staging
    staged_ =
        at::empty({size}, at::TensorOptions().dtype(at::kLong).device(model_.options().device));
    graphs_->Clear();
  }
  for (int64_t l = 0; l < layers_; ++l) {
    if (pools_[static_cast<size_t>(l)].capacity == 0) Grow(l, 0);
  }
  const int64_t s = staged_rows_, n = static_cast<int64_t>(ids.size());
  int64_t* h = staged_host_.data_ptr<int64_t>();  // host: staging
  std::fill(h, h + staged_host_.numel(), 0);
  int64_t max_keys = 1;
  for (int64_t i = 0; i < n; ++i) {
    const size_t row = static_cast<size_t>(i);
    auto it = regions_.find(caches[row]);
    SIFT_CHECK(it != regions_.end(), "DecodePool::Step: row ", i, "'s cache was not admitted");
    Region& r = it->second;
    SIFT_CHECK(positions[row] >= 0 && positions[row] < rope_cos_.size(0),
               "DecodePool::Step: position ", positions[row], " is past the model's context (",
               rope_cos_.size(0), ")");
    h[i] = ids[row];
    h[s + i] = positions[row];
    for (int64_t l = 0; l < layers_; ++l) {
      const size_t li = static_cast<size_t>(l);
      const int64_t used = r.size[li] + 1;
      SIFT_CHECK(used <= r.capacity[li], "DecodePool::Step: row ", i, "'s region in layer ", l,
                 " is full (", r.capacity[li], " entries)");
      h[OffsetsAt(s, l) + i] = r.offset[li];
      h[UsedAt(s, layers_, l) + i] = used;
      max_keys = std::max(max_keys, r.capacity[li]);
    }
    regions->push_back(&r);
  }
  for (int64_t l = 0; l < layers_; ++l) {
    // Padding rows: token 0 at position 0, offset 0, in the scratch entry.
    for (int64_t i = n; i < rows; ++i) h[UsedAt(s, layers_, l) + i] = kScratchEntries;
    h[OffsetsAt(s, l) + rows] = pools_[static_cast<size_t>(l)].capacity;  // cu_seqlens_k's end
  }
  staged_.copy_(staged_host_);
  return NextPowerOfTwo(max_keys);  // a bucket, so a graph serves a request's whole life
}

at::Tensor DecodePool::Replay(int64_t rows, int64_t max_keys) {
#ifdef SIFT_DECODE_GRAPHS
  if (!eager_why_.empty() || graphs_->broken) return {};
  const auto key = std::make_pair(rows, max_keys);
  auto found = graphs_->by_bucket.find(key);
  if (found == graphs_->by_bucket.end()) {
    try {
      Graphs::Captured c;
      c.graph = std::make_unique<at::cuda::CUDAGraph>();
      // Captured on a side stream (capture is not allowed on the legacy default stream),
      // ordered after the staging copy on the current one and before what follows it.
      const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
      const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
      at::cuda::CUDAEvent staged;
      staged.record(current);
      staged.block(side);
      {
        c10::cuda::CUDAStreamGuard guard(side);
        // Warm-up on the capturing stream (library handles, kernel choice): it computes this
        // step once; the replay below writes the same k/v to the same entries again.
        Compute(rows, max_keys);
        side.synchronize();
        c.graph->capture_begin();
        c.logits = Compute(rows, max_keys);
        c.graph->capture_end();
      }
      at::cuda::CUDAEvent captured;
      captured.record(side);
      captured.block(current);
      found = graphs_->by_bucket.emplace(key, std::move(c)).first;
    } catch (const c10::Error& e) {
      graphs_->broken = true;
      graphs_->Clear();
      std::fprintf(stderr,
                   "[sift] decode pool: capturing a CUDA graph failed, eager steps from now on: "
                   "%s\n",
                   e.what_without_backtrace());
      return {};
    }
  }
  found->second.graph->replay();
  return found->second.logits;
#else
  (void)rows;
  (void)max_keys;
  return {};
#endif
}

at::Tensor DecodePool::Compute(int64_t rows, int64_t max_keys) {
  const int64_t s = staged_rows_;
  const at::Tensor ids = staged_.narrow(0, 0, rows);
  const at::Tensor pos = staged_.narrow(0, s, rows);
  const RopeTables rope{rope_cos_.index_select(0, pos), rope_sin_.index_select(0, pos)};
  return model_.DecodeLayers(
      ids, rope, [&](int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        LayerPool& pool = pools_[static_cast<size_t>(layer)];
        const at::Tensor offsets = staged_.narrow(0, OffsetsAt(s, layer), rows);
        const at::Tensor len = staged_.narrow(0, UsedAt(s, layers_, layer), rows);
        const at::Tensor at_entry = offsets + len - 1;  // device-side append index
        pool.k.index_copy_(0, at_entry, k.to(pool.k.scalar_type()));
        pool.v.index_copy_(0, at_entry, v.to(pool.v.scalar_type()));
        return Attend(layer, q, rows, max_keys);
      });
}

at::Tensor DecodePool::Attend(int64_t layer, const at::Tensor& q, int64_t rows, int64_t max_keys) {
  const LayerPool& pool = pools_[static_cast<size_t>(layer)];
  const int64_t s = staged_rows_;
  const int64_t hq = q.size(1), hkv = pool.k.size(1), hd = q.size(2), group = hq / hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor len = staged_.narrow(0, UsedAt(s, layers_, layer), rows);
#ifdef SIFT_DECODE_GRAPHS
  if (flash_) {
    // One query per row: cu_seqlens_q = 0..rows; each row's keys start at its region's offset
    // and seqused_k says how many it reads (max_keys: the bucket's bound, for the kernel's split).
    const at::Tensor cu_q = at::arange(rows + 1, staged_.options().dtype(at::kInt));
    const at::Tensor cu_k = staged_.narrow(0, OffsetsAt(s, layer), rows + 1).to(at::kInt);
    const at::Tensor seqused = len.to(at::kInt);
    const at::Tensor out = std::get<0>(at::_flash_attention_forward(
        q.to(pool.k.scalar_type()).contiguous(), pool.k, pool.v, cu_q, cu_k, 1, max_keys, 0.0,
        /*is_causal=*/false, /*return_debug_mask=*/false, scale, std::nullopt, std::nullopt,
        seqused));
    return out.reshape({rows, hq, hd});
  }
#endif
  // Each row's region gathered up to max_keys and masked past its length: the same operators
  // for every step of a bucket (no host read), exact softmax in fp32.
  const at::Tensor offsets = staged_.narrow(0, OffsetsAt(s, layer), rows);
  const at::Tensor index =
      (offsets.unsqueeze(1) + at::arange(max_keys, offsets.options()).unsqueeze(0))
          .clamp_max(pool.capacity - 1);  // [rows, max_keys]
  const at::Tensor keys =
      pool.k.index_select(0, index.reshape({-1})).view({rows, max_keys, hkv, hd}).to(at::kFloat);
  const at::Tensor values =
      pool.v.index_select(0, index.reshape({-1})).view({rows, max_keys, hkv, hd}).to(at::kFloat);
  const at::Tensor qg = q.to(at::kFloat).reshape({rows, hkv, group, hd});
  at::Tensor scores = at::einsum("rhgd,rkhd->rhgk", {qg, keys}) * scale;
  const at::Tensor past =
      at::arange(max_keys, len.options()).unsqueeze(0) >= len.unsqueeze(1);  // [rows, max_keys]
  scores.masked_fill_(past.view({rows, 1, 1, max_keys}), -std::numeric_limits<float>::infinity());
  return at::einsum("rhgk,rkhd->rhgd", {scores.softmax(-1), values}).reshape({rows, hq, hd});
}

}  // namespace sift
