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
                       const HopTimeouts* timeouts, const CurveClientKeys* curve);

}  // namespace

HopOutcome CallHop(const std::string& endpoint, nlohmann::json header,
                   std::vector<zmq::message_t> payload, StageContext& context,
                   const HopTimeouts* timeouts, const CurveClientKeys* curve) {
  if (timeouts == nullptr) {
    return CallHopOnce(endpoint, std::move(header), std::move(payload), context, nullptr, curve);
  }
  const std::string open = Breakers().Check(endpoint);
  if (!open.empty()) {
    HopOutcome failed;
    failed.status = Status(StatusCode::kUnavailable, "worker_unavailable", endpoint + ": " + open);
    return failed;
  }
  HopOutcome out =
      CallHopOnce(endpoint, std::move(header), std::move(payload), context, timeouts, curve);
  if (!out.done.type.empty()) {
    Breakers().Success(endpoint);  // the worker answered
  } else if (out.status.code() == StatusCode::kUnavailable) {
    Breakers().Failure(endpoint, out.status.message(), *timeouts);
  }
  return out;
}

namespace {

// One hop on its own DEALER socket: connect, send "run", then relay the executor's progress and
// emits to the request's context, forward a cancel, and wait for the one "done". With timeouts
// (a remote worker) the connection, the first reply and silences are bounded; without (in
// process) it waits as long as the stage runs.
class HopCall {
 public:
  HopCall(const std::string& endpoint, StageContext& context, const HopTimeouts* timeouts,
          const CurveClientKeys* curve)
      : endpoint_(endpoint),
        context_(context),
        timeouts_(timeouts),
        curve_(curve != nullptr && curve->enabled()),
        socket_(HopContext(), zmq::socket_type::dealer) {
    static std::atomic<uint64_t> next_hop{1};
    hop_ = next_hop++;
    socket_.set(zmq::sockopt::linger, 0);
    if (curve_) {
      socket_.set(zmq::sockopt::curve_serverkey, curve->server_key);
      socket_.set(zmq::sockopt::curve_publickey, curve->public_key);
      socket_.set(zmq::sockopt::curve_secretkey, curve->secret_key);
    }
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.set(zmq::sockopt::rcvhwm, 0);
    if (timeouts_ != nullptr) socket_.set(zmq::sockopt::immediate, 1);  // queue only when connected
    socket_.connect(endpoint_);
  }

  HopOutcome Run(nlohmann::json header, std::vector<zmq::message_t> payload) {
    header["hop"] = hop_;
    HopOutcome out;
    if (timeouts_ != nullptr && !WaitConnected(&out)) return out;
    if (!zmq::send_multipart(socket_, MakeHop("run", header, std::move(payload)),
                             zmq::send_flags::dontwait)) {
      return Unavailable("cannot send the stage (no connection)");
    }
    last_heard_ = Clock::now();
    while (true) {
      zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLIN, 0};
      PollHop(&item, 1, std::chrono::milliseconds(20));
      if (!cancel_sent_ && context_.Cancelled()) SendCancel();
      if (!(item.revents & ZMQ_POLLIN)) {
        if (timeouts_ != nullptr && TimedOut(&out)) return out;
        continue;
      }
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        continue;
      }
      HopMessage msg;
      try {
        msg = ParseHop(frames, 0);
      } catch (const std::exception& e) {
        out.status = Status(StatusCode::kInternal, "bad_hop_reply", endpoint_ + ": " + e.what());
        return out;
      }
      if (msg.header.value("hop", uint64_t{0}) != hop_) continue;  // not ours (cannot happen)
      last_heard_ = Clock::now();
      started_ = true;
      if (Handle(std::move(msg), &out)) return out;
    }
  }

 private:
  HopOutcome Unavailable(const std::string& why) const {
    HopOutcome failed;
    failed.status = Status(StatusCode::kUnavailable, "worker_unavailable", endpoint_ + ": " + why);
    return failed;
  }

  // Writable once a connection is complete (ZMQ_IMMEDIATE): a dead worker fails in connect_ms
  // instead of first_reply_ms. False (with *out set) when it did not connect or was cancelled.
  bool WaitConnected(HopOutcome* out) {
    const Clock::time_point start = Clock::now();
    while (MsSince(start) < timeouts_->connect_ms) {
      if (context_.Cancelled()) {
        *out = HopOutcome{context_.CancelStatus(), {}};
        return false;
      }
      zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLOUT, 0};
      PollHop(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLOUT) != 0) return true;
    }
    *out = Unavailable("cannot connect within " + std::to_string(timeouts_->connect_ms) +
                       " ms (is `siftd --worker` running there?" +
                       (curve_ ? " CURVE: is the worker key right, and does the worker's "
                                 "--curve-client-keys list this daemon's public key?)"
                               : ")"));
    return false;
  }

  // True (with *out set) when the worker has been quiet too long: before its first reply, or
  // between replies.
  bool TimedOut(HopOutcome* out) const {
    if (!started_ && MsSince(last_heard_) > timeouts_->first_reply_ms) {
      *out = Unavailable("no answer within " + std::to_string(timeouts_->first_reply_ms) +
                         " ms (is `siftd --worker` running there?)");
      return true;
    }
    if (started_ && MsSince(last_heard_) > timeouts_->silence_ms) {
      *out = Unavailable("the worker went silent for " + std::to_string(timeouts_->silence_ms) +
                         " ms");
      return true;
    }
    return false;
  }

  void SendCancel() {
    if (cancel_sent_) return;
    cancel_sent_ = true;
    zmq::send_multipart(socket_, MakeHop("cancel", {{"hop", hop_}}), zmq::send_flags::dontwait);
  }

  // Relays one message of ours; true (with *out set) at "done".
  bool Handle(HopMessage msg, HopOutcome* out) {
    if (msg.type == "progress") {
      context_.Progress(msg.header.value("what", ""), msg.header.value("done", int64_t{0}),
                        msg.header.value("total", int64_t{0}));
    } else if (msg.type == "emit") {
      const std::string text = msg.payload.empty() ? "" : msg.payload[0].to_string();
      if (!client_gone_ && !context_.Emit(text, msg.header.value("token", TokenId{-1}))) {
        client_gone_ = true;
        SendCancel();
      }
    } else if (msg.type == "done") {
      out->status = StatusFromJson(msg.header.value("status", nlohmann::json::object()));
      if (out->status.code() == StatusCode::kCancelled) {
        if (context_.Cancelled()) {
          out->status = context_.CancelStatus();
        } else if (client_gone_) {
          out->status =
              Status(StatusCode::kCancelled, "client_gone", "the client stopped receiving text");
        }
      }
      out->done = std::move(msg);
      return true;
    }
    return false;
  }

  const std::string& endpoint_;
  StageContext& context_;
  const HopTimeouts* timeouts_;
  const bool curve_;
  zmq::socket_t socket_;
  uint64_t hop_ = 0;
  bool started_ = false, cancel_sent_ = false, client_gone_ = false;
  Clock::time_point last_heard_;
};

HopOutcome CallHopOnce(const std::string& endpoint, nlohmann::json header,
                       std::vector<zmq::message_t> payload, StageContext& context,
                       const HopTimeouts* timeouts, const CurveClientKeys* curve) {
  return HopCall(endpoint, context, timeouts, curve).Run(std::move(header), std::move(payload));
}

}  // namespace
}  // namespace sift::daemon
