// RequestState <-> frames: how a request crosses a process boundary (a stage hop to a
// `siftd --worker`).
//
// An encoded state is a JSON header plus one binary frame per tensor. The header holds every
// small field (ids, plan, options, result) and, in place of each tensor, a descriptor
// {"frame": i, "dtype": "bf16", "shape": [..]}; frame i holds the tensor's elements, contiguous,
// row-major, in host byte order (little-endian on every platform sift supports). No strides, no
// pickled objects: a reader in any language can rebuild every tensor from dtype and shape.
// Ragged caches are natural: every layer's k, v and positions are separate tensors.
//
// Header schema ("format": "sift.state/2"): see EncodeState in state_codec.cc, which lists
// every field in one place; docs/pipelines.md describes it for other implementations. What
// travels is what a stage reads and writes; state.stats (the pipeline runner's cost records)
// stays with the caller and is not encoded.
//
// THREADING: pure functions. ERRORS: DecodeState throws sift::Error naming the bad field.
#ifndef SIFT_DAEMON_STATE_CODEC_H_
#define SIFT_DAEMON_STATE_CODEC_H_

#include <ATen/ATen.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "sift/request_state.h"

namespace sift::daemon {

inline constexpr const char* kStateFormat = "sift.state/2";

struct EncodedState {
  nlohmann::json header;
  // Frame i is the bytes of tensors[i]: contiguous CPU tensors (shared with the state where
  // the state's tensor already was one, so encoding copies only what it must).
  std::vector<at::Tensor> tensors;
};

// A borrowed view of one received frame.
struct FrameView {
  const void* data = nullptr;
  size_t size = 0;
};

EncodedState EncodeState(const RequestState& state);

// Replaces *state with the decoded state (stats empty: they do not travel). Tensors are copied
// out of the frames (which may be released afterwards) and placed on `device`; the cache too.
// The caller of a remote hop takes the reply over with RequestState::AdoptProducts.
void DecodeState(const nlohmann::json& header, const std::vector<FrameView>& frames,
                 const at::Device& device, RequestState* state);

// "f32", "bf16", ... as used in tensor descriptors; ParseWireDtype throws on unknown names.
const char* WireDtypeName(at::ScalarType dtype);
at::ScalarType ParseWireDtype(const std::string& name);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_STATE_CODEC_H_
