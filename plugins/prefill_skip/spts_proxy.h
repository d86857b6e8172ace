// SptsProxy: the low-rank proxy FFNs of LTP (paper §3.3, Eq. 9-13) and their file format.
//
// Per layer l the proxy keeps D_low of the FFN's intermediate channels (`channels`) and a rank-r
// factorisation of each reduced projection, in the paper's orientation (W' is hidden x D_low):
//   W'_gate = w_gate[channels, :]^T ~ gate_u [hidden, r] x gate_v [r, D_low]   (same for up)
//   W'_down = w_down[:, channels]   ~ down_u [hidden, r] x down_v [r, D_low]
// and f(x) = (silu(x gate_u gate_v) * (x up_u up_v)) down_v^T down_u^T (Eq. 12). Norms() returns
// ||f(x_n)||_2 per row (Eq. 13).
//
// File (little-endian): 8 bytes "SIFTSPTS", u32 format version (1), u32 header length H, H bytes
// of JSON (model name/file/shape, d_low, rank, rho, calibration data description, and the
// `tensors` list: name, layer, dtype "f32"/"i64", shape, in file order), then the raw tensors in
// that order with no padding. docs/methods/spts.md documents it.
//
// OWNERSHIP: an SptsProxy owns its tensors; LoadShared() hands out one immutable copy per file
//            (path + size + mtime) and device, shared by every request.
// DEVICES:   Load() reads into CPU tensors; LoadShared(path, device) and To(device) place them on
//            the model's device, where Norms() needs them (it checks).
// THREADING: const methods are safe from several threads; LoadShared is thread-safe.
// ERRORS:    Load/Save/CheckModel throw sift::Error naming the file and the problem.
#ifndef SIFT_PLUGINS_PREFILL_SKIP_SPTS_PROXY_H_
#define SIFT_PLUGINS_PREFILL_SKIP_SPTS_PROXY_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/model.h"

namespace sift::plugins {

struct SptsLayerProxy {
  at::Tensor channels;        // [D_low] int64, ascending
  at::Tensor gate_u, gate_v;  // [hidden, r], [r, D_low] fp32
  at::Tensor up_u, up_v;
  at::Tensor down_u, down_v;  // [hidden, r], [r, D_low]
};

class SptsProxy {
 public:
  nlohmann::json header;  // "model", "d_low", "rank", "rho", "calibration" (written by Save)
  std::vector<SptsLayerProxy> layers;

  int64_t d_low() const { return layers.empty() ? 0 : layers[0].channels.size(0); }
  int64_t rank() const { return layers.empty() ? 0 : layers[0].gate_u.size(1); }

  // h: [n, hidden] (any float dtype, on this proxy's device) -> [n] fp32, ||f(h_n)||_2 of layer
  // `layer`'s proxy.
  at::Tensor Norms(int64_t layer, const at::Tensor& h) const;
  // A copy with every tensor on `device`.
  SptsProxy To(const at::Device& device) const;

  void Save(const std::string& path) const;
  static SptsProxy Load(const std::string& path);
  // Throws unless the proxy was built for a model of this shape (layers, hidden, FFN width).
  void CheckModel(const ModelConfig& config, const std::string& path) const;

  // One shared, immutable proxy per file and device (reloaded when its size or mtime changes).
  static std::shared_ptr<const SptsProxy> LoadShared(const std::string& path,
                                                     const at::Device& device = at::kCPU);
};

}  // namespace sift::plugins

#endif  // SIFT_PLUGINS_PREFILL_SKIP_SPTS_PROXY_H_
