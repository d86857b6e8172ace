// libFuzzer target: the stage-hop state codec (daemon/state_codec.h) as a `siftd --worker`
// meets it: a JSON header and binary frames from a peer. A state that decodes is encoded and
// decoded again, and the two encodings must agree (header and frame bytes).
//
// Input: the header, then each frame, separated by the two bytes 0x01 0x01 (the seeds in
// tests/fuzz/corpus/state_codec are real encoded states; tools/fuzz/make_seeds.py writes them).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "daemon/state_codec.h"

namespace {

std::vector<std::string_view> Split(std::string_view input) {
  std::vector<std::string_view> parts;
  for (size_t at = input.find("\x01\x01"); at != std::string_view::npos;
       at = input.find("\x01\x01")) {
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + 2);
  }
  parts.push_back(input);
  return parts;
}

bool Decode(const nlohmann::json& header, const std::vector<sift::daemon::FrameView>& frames,
            sift::RequestState* state) {
  try {
    sift::daemon::DecodeState(header, frames, at::kCPU, state);
    return true;
  } catch (const std::exception&) {  // sift::Error; a LibTorch check would be c10::Error
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sift::daemon;
  const std::vector<std::string_view> parts =
      Split(std::string_view(reinterpret_cast<const char*>(data), size));
  const nlohmann::json header = nlohmann::json::parse(parts[0], nullptr, false);
  if (header.is_discarded()) return 0;
  std::vector<FrameView> frames;
  for (size_t i = 1; i < parts.size(); ++i) frames.push_back({parts[i].data(), parts[i].size()});
  sift::RequestState state;
  if (!Decode(header, frames, &state)) return 0;
  // Round trip: what decoded must encode, decode and encode to the same thing.
  EncodedState first = EncodeState(state);
  std::vector<FrameView> views;
  for (const at::Tensor& t : first.tensors) views.push_back({t.data_ptr(), t.nbytes()});
  sift::RequestState again;
  if (!Decode(first.header, views, &again)) __builtin_trap();
  EncodedState second = EncodeState(again);
  if (first.header != second.header || first.tensors.size() != second.tensors.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    const at::Tensor& a = first.tensors[i];
    const at::Tensor& b = second.tensors[i];
    if (a.nbytes() != b.nbytes() ||
        (a.nbytes() > 0 && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) != 0)) {
      __builtin_trap();
    }
  }
  return 0;
}
