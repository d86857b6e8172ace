#include "daemon/hop_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <zmq_addon.hpp>

namespace sift::daemon {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Per-endpoint circuit breaker (see the header).
class Breaker {
 public:
  // "" when hops to `endpoint` may proceed, else why not.
  std::string Check(const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = state_.find(endpoint);
    if (it == state_.end()) return "";
    const int64_t left =
        std::chrono::duration_cast<std::chrono::milliseconds>(it->second.open_until - Clock::now())
            .count();
    if (left <= 0) return "";  // half open: this hop probes
    return "circuit open for another " + std::to_string(left) + " ms after " +
           std::to_string(it->second.failures) + " failure(s); the last: " + it->second.last;
  }
  void Failure(const std::string& endpoint, const std::string& why, const HopTimeouts& t) {
    std::lock_guard<std::mutex> lock(mu_);
    State& s = state_[endpoint];
    ++s.failures;
    int64_t backoff = t.breaker_min_ms;
    for (int i = 1; i < s.failures && backoff < t.breaker_max_ms; ++i) backoff *= 2;
    backoff = std::min<int64_t>(backoff, t.breaker_max_ms);
    s.open_until = Clock::now() + std::chrono::milliseconds(backoff);
    s.last = why;
  }
  void Success(const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.erase(endpoint);
  }

 private:
  struct State {
    int failures = 0;
    Clock::time_point open_until;
    std::string last;
  };
  std::mutex mu_;
  std::map<std::string, State> state_;
};

Breaker& Breakers() {
  static auto* breaker = new Breaker;
  return *breaker;
}

HopOutcome CallHopOnce(const std::string& endpoint, nlohmann::json header,
                       std::vector<zmq::message_t> payload, StageContext& context,
                       const HopTimeouts* timeouts);

}  // namespace

HopOutcome CallHop(const std::string& endpoint, nlohmann::json header,
                   std::vector<zmq::message_t> payload, StageContext& context,
                   const HopTimeouts* timeouts) {
  if (timeouts == nullptr) {
    return CallHopOnce(endpoint, std::move(header), std::move(payload), context, nullptr);
  }
  const std::string open = Breakers().Check(endpoint);
  if (!open.empty()) {
    HopOutcome failed;
    failed.status = Status(StatusCode::kUnavailable, "worker_unavailable", endpoint + ": " + open);
    return failed;
  }
  HopOutcome out = CallHopOnce(endpoint, std::move(header), std::move(payload), context, timeouts);
  if (!out.done.type.empty()) {
    Breakers().Success(endpoint);  // the worker answered
  } else if (out.status.code() == StatusCode::kUnavailable) {
    Breakers().Failure(endpoint, out.status.message(), *timeouts);
  }
  return out;
}

namespace {

HopOutcome CallHopOnce(const std::string& endpoint, nlohmann::json header,
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
  if (timeouts != nullptr) socket.set(zmq::sockopt::immediate, 1);  // queue only when connected
  socket.connect(endpoint);
  auto unavailable = [&](const std::string& why) {
    HopOutcome failed;
    failed.status = Status(StatusCode::kUnavailable, "worker_unavailable", endpoint + ": " + why);
    return failed;
  };
  if (timeouts != nullptr) {
    // Writable once a connection is complete (ZMQ_IMMEDIATE): a dead worker fails in
    // connect_ms instead of first_reply_ms.
    const Clock::time_point start = Clock::now();
    bool writable = false;
    while (!writable && MsSince(start) < timeouts->connect_ms) {
      if (context.Cancelled()) return HopOutcome{context.CancelStatus(), {}};
      zmq::pollitem_t item = {socket.handle(), 0, ZMQ_POLLOUT, 0};
      PollHop(&item, 1, std::chrono::milliseconds(20));
      writable = (item.revents & ZMQ_POLLOUT) != 0;
    }
    if (!writable) {
      return unavailable("cannot connect within " + std::to_string(timeouts->connect_ms) +
                         " ms (is `siftd --worker` running there?)");
    }
  }
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

}  // namespace
}  // namespace sift::daemon
