// The KV of a decode batch in one pool at fixed addresses, so that a decode step is a fixed
// sequence of device operators over fixed buffers: on CUDA captured once per batch-size bucket as
// a CUDA graph and replayed, elsewhere run eagerly (the same operators, for tests on the CPU).
//
// A request's cache is admitted once (each layer's entries moved into a region of that layer's
// pool as long as the layer plus the remaining tokens), decodes there, and is released when it
// leaves (its entries, the decoded ones too, moved back into its cache). A step stages every
// row's token, position, and per layer its region and length into one host buffer and copies it to
// the device in one transfer; the graph reads them from there: RoPE rows gathered from a device
// table, the new k/v written at region + length by device-side index, and attention over each row's
// length. The attention is LibTorch's flash varlen kernel with `seqused_k` (each row reads its own
// region's used length; LibTorch >= 2.5, bf16/fp16) where it applies, else a gather of each row's
// region masked by its length (the CPU and fp32). docs/engine.md#decode-graphs.
//
// OWNERSHIP: the pool borrows the Model (the caller keeps it alive) and, between Admit and
//            Release, the caller's caches (empty meanwhile: their entries live in the pool; they
//            must not be changed or destroyed before Release).
// THREADING: not thread-safe: one thread (BatchEngine's loop) calls everything.
// ERRORS:    sift::Error on misuse (a cache admitted twice, a step over a cache not admitted, a
//            model the pool cannot run); LibTorch's errors propagate. A graph that fails to
//            capture turns graphs off for the pool (one stderr line) and the step runs eagerly.
#ifndef SIFT_DECODE_POOL_H_
#define SIFT_DECODE_POOL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sift/kv_cache.h"
#include "sift/model.h"

namespace sift {

// Where a batch's decode steps keep their KV (BatchEngineOptions::decode_pool, --decode-pool).
enum class DecodePoolMode {
  kAuto,  // in a sift::DecodePool where its steps are CUDA graphs (DecodePool::GraphsAvailable)
  kOn,    // in a DecodePool wherever one runs (eager steps without graphs: the CPU's tests)
  kOff,   // each request's own cache, Model::DecodeStep
};
// "auto" | "on" | "off" into *mode; false (and *mode untouched) for anything else.
bool ParseDecodePoolMode(const std::string& text, DecodePoolMode* mode);

struct DecodePoolOptions {
  // Capture steps as CUDA graphs where GraphsAvailable(); false: always eager.
  bool graphs = true;
  // Entries each layer's pool starts with (0: what the first admission needs, at least 4096).
  // A layer's pool doubles when an admission does not fit (moving its regions: graphs are
  // captured anew).
  int64_t initial_entries = 0;
};

class DecodePool {
 public:
  // Empty when `model` can decode through a pool, else why not (native weights with the CPU
  // kernels decode on their own host path).
  static std::string Unsupported(const Model& model);
  // True when steps can be CUDA graphs: a build with CUDA, LibTorch >= 2.5 (flash varlen with
  // seqused_k), the model on a CUDA device in bf16 or fp16. Else false, with the reason in *why.
  static bool GraphsAvailable(const Model& model, std::string* why = nullptr);
  // Whether a batch in `mode` decodes through a pool on `model`: kOn or kAuto where
  // GraphsAvailable(), and Unsupported() empty. Else false, with the reason in *why.
  static bool Wanted(const Model& model, DecodePoolMode mode, std::string* why = nullptr);

  // Throws sift::Error when Unsupported(model) is not empty.
  explicit DecodePool(const Model& model, DecodePoolOptions options = {});
  ~DecodePool();
  DecodePool(const DecodePool&) = delete;
  DecodePool& operator=(const DecodePool&) = delete;

  // Moves each layer of `cache` into a region of that layer's pool as long as the layer plus
  // `max_new_tokens`: the cache is left empty (its memory released), so the KV is held once.
  void Admit(KvCache& cache, int64_t max_new_tokens);
  // Puts the region's entries back into `cache` (those admitted, then those decoded, at the
  // steps' positions) and frees the region. A cache not admitted is left as it is.
  void Release(KvCache& cache);
  bool Holds(const KvCache& cache) const { return regions_.count(&cache) != 0; }
  // Model::DecodeStep over admitted caches: row i is ids[i] at positions[i], appended to
  // caches[i]'s region, attending to it. Returns [rows, vocab] fp32 on the model's device, valid
  // until the next Step. Throws when a cache was not admitted or has no room left.
  at::Tensor Step(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                  const std::vector<KvCache*>& caches);

  // "cuda graphs (3 captured)" or "eager (why)": what the steps run as (logs, benchmarks).
  std::string Describe() const;
  int64_t graphs_captured() const;
  int64_t capacity(int64_t layer) const;  // entries in `layer`'s pool
  // Entries of `layer`'s pool held by admitted requests' regions (each as long as the request's
  // layer held at Admit plus its new tokens).
  int64_t in_use(int64_t layer) const;

 private:
  struct Region {
    // Per layer: entries [offset, offset + capacity) of that layer's pool, as long as the layer
    // held at Admit plus the new tokens (PyramidKV's short layers take short regions).
    std::vector<int64_t> offset, capacity;
    std::vector<int64_t> admitted;               // per layer: entries the cache held at Admit
    std::vector<at::Tensor> admitted_positions;  // per layer: their positions [Hkv, n], host
    std::vector<int64_t> size;                   // per layer: entries now (admitted + decoded)
    std::vector<int64_t> positions;              // the positions of the decoded entries, in order
  };
  // One layer's pool: its k/v at fixed addresses and its free entries.
  struct LayerPool {
    at::Tensor k, v;                  // [capacity, Hkv, hd], device
    int64_t capacity = 0;             // entries
    std::map<int64_t, int64_t> free;  // free entries: offset -> count
  };
  struct Graphs;  // the captured steps (CUDA builds), by bucket

  // A region of `entries` in `layer`'s pool (first fit), growing that pool if needed.
  int64_t Allocate(int64_t layer, int64_t entries);
  void Free(int64_t layer, int64_t offset, int64_t entries);
  void Grow(int64_t layer, int64_t min_capacity);
  // Writes the step's inputs for `rows` (a bucket) into the staging buffers and copies them to
  // the device; returns the bucket's key bound and each row's region in *regions.
  int64_t Stage(const std::vector<TokenId>& ids, const std::vector<int64_t>& positions,
                const std::vector<KvCache*>& caches, int64_t rows, std::vector<Region*>* regions);
  // The bucket's graph replayed (captured first if new); undefined where steps are not graphs.
  at::Tensor Replay(int64_t rows, int64_t max_keys);
  // The step over the staged inputs of `rows` (a bucket) with keys read up to `max_keys`: the
  // operators a graph captures.
  at::Tensor Compute(int64_t rows, int64_t max_keys);
  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t rows, int64_t max_keys);

  const Model& model_;
  const DecodePoolOptions options_;
  const int64_t layers_;
  bool flash_ = false;                        // attention by the flash varlen kernel
  std::string eager_why_;                     // why steps are not graphs (empty when they are)
  std::vector<LayerPool> pools_;              // per layer
  std::map<const KvCache*, Region> regions_;  // admitted caches
  at::Tensor rope_cos_, rope_sin_;            // [positions, hd / 2] fp32, device
  at::Tensor staged_host_, staged_;           // the step's inputs (layout: decode_pool.cc)
  int64_t staged_rows_ = 0;                   // rows the staging buffers hold
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace sift

#endif  // SIFT_DECODE_POOL_H_
