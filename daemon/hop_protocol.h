// The stage-hop protocol ("SIFTHOP/1"): how a pipeline runner hands one stage of one request to
// the executor that runs it, over ZeroMQ, in process (inproc) or to a `siftd --worker` (tcp).
//
// Caller (DEALER, one per hop) -> server (ROUTER), frames:
//   "SIFTHOP/1" | type | JSON header | payload frames...
//     run     {"hop", "plugin", "version", "label", "params", "model", ["state"]}
//             payload: in process, one 8-byte handle (a pointer to the caller's job, never
//             accepted from a tcp peer); remote, the state's tensor frames (state_codec.h)
//     cancel  {"hop"}                       idempotent; late or unknown hops are ignored
// Server -> caller, same layout:
//   started   {"hop"}                       the hop was accepted and is queued or running
//   heartbeat {"hop"}                       every kHeartbeatMs while it runs
//   progress  {"hop", "what", "done", "total"}
//   emit      {"hop", "token"} | text       streamed text (raw UTF-8 frame, not JSON)
//   done      {"hop", "status": {"code", "reason", "message"}, ["state"]} | state frames
// Exactly one `done` ends every accepted hop. JSON headers are UTF-8 objects.
//
// THREADING: helpers are pure; HopContext() is shared by every thread (zmq contexts are).
// ERRORS:    ParseHop throws sift::Error on a malformed message.
#ifndef SIFT_DAEMON_HOP_PROTOCOL_H_
#define SIFT_DAEMON_HOP_PROTOCOL_H_

#include <ATen/ATen.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "sift/status.h"

namespace sift::daemon {

inline constexpr const char* kHopMagic = "SIFTHOP/1";
inline constexpr int kHeartbeatMs = 1000;

struct HopMessage {
  std::string type;
  nlohmann::json header;
  std::vector<zmq::message_t> payload;
};

// The process-wide ZeroMQ context for stage hops; never destroyed (no zmq_ctx_term hang at
// exit while a detached executor still holds a socket).
zmq::context_t& HopContext();

// [magic, type, header, payload...]; the payload frames are moved in.
std::vector<zmq::message_t> MakeHop(const std::string& type, const nlohmann::json& header,
                                    std::vector<zmq::message_t> payload = {});
// Parses frames[offset...] (offset skips ROUTER identity frames).
HopMessage ParseHop(std::vector<zmq::message_t>& frames, size_t offset);

// zmq::poll that treats an interrupting signal (EINTR) as "nothing ready" instead of throwing.
int PollHop(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout);

// A frame that shares the tensor's storage (no copy); the tensor is kept alive until ZeroMQ
// has sent it. REQUIRES: contiguous CPU tensor.
zmq::message_t TensorFrame(const at::Tensor& tensor);

nlohmann::json StatusToJson(const Status& status);
Status StatusFromJson(const nlohmann::json& j);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_HOP_PROTOCOL_H_
