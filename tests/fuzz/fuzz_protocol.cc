// libFuzzer target: the SIFT/1 client message parser (daemon/protocol.h) with the daemon's
// header limits (json_limits.h), and what the front end does with a parsed message: echo the
// id and nonce, serialise replies.
//
// Input: the message's frames after the routing id, separated by the two bytes 0x01 0x01.
// With no separator the input is the header and the magic "SIFT/1" is prepended, so the seed
// corpus (tests/fuzz/corpus/protocol) is plain JSON headers.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/protocol.h"

namespace {

std::vector<std::string_view> Frames(std::string_view input) {
  std::vector<std::string_view> frames;
  for (size_t at = input.find("\x01\x01"); at != std::string_view::npos;
       at = input.find("\x01\x01")) {
    frames.push_back(input.substr(0, at));
    input.remove_prefix(at + 2);
  }
  frames.push_back(input);
  if (frames.size() == 1) frames.insert(frames.begin(), sift::daemon::kMagic);
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sift::daemon;
  using sift::Status;
  using sift::StatusCode;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> frames = Frames(input);
  ClientMessage message;
  JsonLimits limits;
  // Scaled down from the daemon's so that inputs of a few KB reach every limit.
  limits.max_bytes = 2048;
  limits.max_values = 256;
  limits.max_containers = 64;
  limits.max_depth = 16;
  const Status status = ParseClientMessage(frames, &message, limits);
  // What the front end sends back either way.
  nlohmann::json reply =
      ErrorHeader(message, status.ok() ? Status(StatusCode::kInternal, "x", "y") : status);
  if (status.ok() && message.type == MessageType::kPing) reply["nonce"] = message.nonce;
  if (status.ok() && message.type == MessageType::kGenerate) {
    reply["params"] = message.generate.params;
    if (message.generate.id.empty() || message.generate.pipeline.empty()) __builtin_trap();
  }
  const std::string bytes = Serialize(reply);
  nlohmann::json back;
  std::vector<std::string_view> reply_frames = {kMagic, bytes};
  if (!ParseReply(reply_frames, &back).ok()) __builtin_trap();  // our own output must parse
  std::string id;
  if (frames.size() > 1) (void)ExtractId(frames[1], &id);
  return 0;
}
