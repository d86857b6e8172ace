#include "daemon/hop_client.h"

#include <atomic>
#include <chrono>
#include <zmq_addon.hpp>

namespace sift::daemon {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

HopOutcome CallHop(const std::string& endpoint, nlohmann::json header,
                   std::vector<zmq::message_t> payload, StageContext& context,
                   const HopTimeouts* timeouts) {
  static std::atomic<uint64_t> next_hop{1};
  const uint64_t hop = next_hop++;
  header["hop"] = hop;
  HopOutcome out;

  zmq::socket_t socket(HopContext(), zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  socket.connect(endpoint);
  auto unavailable = [&](const std::string& why) {
    HopOutcome failed;
    failed.status = Status(StatusCode::kUnavailable, "worker_unavailable", endpoint + ": " + why);
    return failed;
  };
  if (!zmq::send_multipart(socket, MakeHop("run", header, std::move(payload)),
                           zmq::send_flags::dontwait)) {
    return unavailable("cannot send the stage (no connection)");
  }

  bool started = false, cancel_sent = false, client_gone = false;
  Clock::time_point last_heard = Clock::now();
  auto send_cancel = [&] {
    if (cancel_sent) return;
    cancel_sent = true;
    zmq::send_multipart(socket, MakeHop("cancel", {{"hop", hop}}), zmq::send_flags::dontwait);
  };
  while (true) {
    zmq::pollitem_t item = {socket.handle(), 0, ZMQ_POLLIN, 0};
    PollHop(&item, 1, std::chrono::milliseconds(20));
    if (!cancel_sent && context.Cancelled()) send_cancel();
    if (!(item.revents & ZMQ_POLLIN)) {
      if (timeouts != nullptr) {
        if (!started && MsSince(last_heard) > timeouts->first_reply_ms) {
          return unavailable("no answer within " + std::to_string(timeouts->first_reply_ms) +
                             " ms (is `siftd --worker` running there?)");
        }
        if (started && MsSince(last_heard) > timeouts->silence_ms) {
          return unavailable("the worker went silent for " + std::to_string(timeouts->silence_ms) +
                             " ms");
        }
      }
      continue;
    }
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      continue;
    }
    HopMessage msg;
    try {
      msg = ParseHop(frames, 0);
    } catch (const std::exception& e) {
      out.status = Status(StatusCode::kInternal, "bad_hop_reply", endpoint + ": " + e.what());
      return out;
    }
    if (msg.header.value("hop", uint64_t{0}) != hop) continue;  // not ours (cannot happen)
    last_heard = Clock::now();
    started = true;
    if (msg.type == "progress") {
      context.Progress(msg.header.value("what", ""), msg.header.value("done", int64_t{0}),
                       msg.header.value("total", int64_t{0}));
    } else if (msg.type == "emit") {
      const std::string text = msg.payload.empty() ? "" : msg.payload[0].to_string();
      if (!client_gone && !context.Emit(text, msg.header.value("token", TokenId{-1}))) {
        client_gone = true;
        send_cancel();
      }
    } else if (msg.type == "done") {
      out.status = StatusFromJson(msg.header.value("status", nlohmann::json::object()));
      if (out.status.code() == StatusCode::kCancelled) {
        if (context.Cancelled()) {
          out.status = context.CancelStatus();
        } else if (client_gone) {
          out.status =
              Status(StatusCode::kCancelled, "client_gone", "the client stopped receiving text");
        }
      }
      out.done = std::move(msg);
      return out;
    }
  }
}

}  // namespace sift::daemon
