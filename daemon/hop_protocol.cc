#include "daemon/hop_protocol.h"

#include <cerrno>

#include "daemon/json_limits.h"
#include "sift/error.h"

namespace sift::daemon {

zmq::context_t& HopContext() {
  static auto* context = new zmq::context_t(1);
  return *context;
}

std::vector<zmq::message_t> MakeHop(const std::string& type, const nlohmann::json& header,
                                    std::vector<zmq::message_t> payload) {
  std::vector<zmq::message_t> frames;
  frames.reserve(3 + payload.size());
  frames.emplace_back(std::string(kHopMagic));
  frames.emplace_back(type);
  frames.emplace_back(header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  for (zmq::message_t& m : payload) frames.push_back(std::move(m));
  return frames;
}

HopMessage ParseHop(std::vector<zmq::message_t>& frames, size_t offset) {
  SIFT_CHECK(frames.size() >= offset + 3, "hop message: expected at least 3 frames, got ",
             frames.size() - std::min(offset, frames.size()));
  SIFT_CHECK(frames[offset].to_string_view() == kHopMagic, "hop message: bad magic");
  HopMessage m;
  m.type = frames[offset + 1].to_string();
  // Bounded like a client header (json_limits.h), with room for a long prompt's state.
  JsonLimits limits;
  limits.max_bytes = size_t{256} << 20;
  limits.max_values = size_t{1} << 26;
  limits.max_containers = size_t{1} << 22;
  std::string reason, why;
  if (!ParseBoundedJson(frames[offset + 2].to_string_view(), limits, &m.header, &reason, &why)) {
    throw Error("hop message: bad JSON header (" + reason + "): " + why);
  }
  SIFT_CHECK(m.header.is_object(), "hop message: the header is not a JSON object");
  for (size_t i = offset + 3; i < frames.size(); ++i) m.payload.push_back(std::move(frames[i]));
  return m;
}

int PollHop(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout) {
  try {
    return zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) {
      for (size_t i = 0; i < count; ++i) items[i].revents = 0;
      return 0;
    }
    throw;
  }
}

zmq::message_t TensorFrame(const at::Tensor& tensor) {
  SIFT_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
             "TensorFrame: expected a contiguous CPU tensor (EncodeState's frames), got one on ",
             tensor.device());
  if (tensor.nbytes() == 0) return zmq::message_t();
  auto* owner = new at::Tensor(tensor);
  // ZeroMQ calls this from its I/O thread (or the receiver's, in process): deleting a Tensor
  // (an atomic refcount drop) is thread-safe.
  return zmq::message_t(
      owner->data_ptr(), owner->nbytes(),  // host: checked above (CPU, contiguous)
      [](void*, void* hint) { delete static_cast<at::Tensor*>(hint); }, owner);
}

nlohmann::json StatusToJson(const Status& status) {
  return {{"code", StatusCodeName(status.code())},
          {"reason", status.reason()},
          {"message", status.message()}};
}

Status StatusFromJson(const nlohmann::json& j) {
  const std::string name = j.value("code", "");
  for (int c = static_cast<int>(StatusCode::kOk); c <= static_cast<int>(StatusCode::kUnavailable);
       ++c) {
    if (name == StatusCodeName(static_cast<StatusCode>(c))) {
      return Status(static_cast<StatusCode>(c), j.value("reason", ""), j.value("message", ""));
    }
  }
  return Status(StatusCode::kInternal, "bad_hop_reply", "unknown status code '" + name + "'");
}

}  // namespace sift::daemon
