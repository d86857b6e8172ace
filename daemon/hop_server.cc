#include "daemon/hop_server.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <zmq_addon.hpp>

#include "daemon/curve.h"
#include "daemon/peer_log_limiter.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Threads on demand: a task never waits for another task to finish.
class ElasticPool {
 public:
  ~ElasticPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
      if (busy_ + queue_.size() > threads_.size()) threads_.emplace_back([this] { Loop(); });
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      lock.unlock();
      task();
      lock.lock();
      --busy_;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t busy_ = 0;
  bool stop_ = false;
};

struct Task {
  std::string identity;
  uint64_t hop = 0;
  std::atomic<bool> cancelled{false};
};

zmq::message_t HopIdFrame(uint64_t hop) { return zmq::message_t(&hop, sizeof(hop)); }

// The StageContext an executor gives the stage: everything goes back to the caller as hop
// messages through the server loop. Emit's answer reflects cancellations that have arrived so
// far (asynchronous: a client that vanished is noticed a message or two later).
class RelayContext : public StageContext {
 public:
  RelayContext(std::shared_ptr<Task> task, zmq::socket_t& back)
      : task_(std::move(task)), back_(back) {}

  bool Cancelled() const override { return task_->cancelled.load(); }
  Status CancelStatus() const override {
    return Status(StatusCode::kCancelled, "cancelled", "the caller cancelled the stage");
  }
  void Progress(const std::string& what, int64_t done, int64_t total) override {
    const Clock::time_point now = Clock::now();
    if (done < total && now - last_progress_ < std::chrono::milliseconds(50)) return;
    last_progress_ = now;
    Send("progress", {{"hop", task_->hop}, {"what", what}, {"done", done}, {"total", total}});
  }
  bool Emit(const std::string& text, TokenId token) override {
    if (Cancelled()) return false;
    std::vector<zmq::message_t> payload;
    payload.emplace_back(text.data(), text.size());
    Send("emit", {{"hop", task_->hop}, {"token", token}}, std::move(payload));
    return !Cancelled();
  }
  void Send(const std::string& type, const json& header, std::vector<zmq::message_t> payload = {}) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(task_->identity.data(), task_->identity.size());
    frames.push_back(HopIdFrame(task_->hop));
    for (zmq::message_t& m : MakeHop(type, header, std::move(payload))) {
      frames.push_back(std::move(m));
    }
    zmq::send_multipart(back_, frames);
  }

 private:
  std::shared_ptr<Task> task_;
  zmq::socket_t& back_;
  Clock::time_point last_progress_{};
};

}  // namespace

class HopServer::Impl {
 public:
  Impl(const std::string& endpoint, Handler handler, const CurveConfig* curve)
      : handler_(std::move(handler)),
        front_(HopContext(), zmq::socket_type::router),
        back_(HopContext(), zmq::socket_type::pull),
        auth_log_(nullptr) {
    static std::atomic<uint64_t> counter{0};
    if (curve != nullptr && curve->enabled) {
      curve_ = *curve;
      // The ZAP handler must exist before the first handshake; one per ZeroMQ context (only
      // `siftd --worker` serves CURVE on the hop context).
      zap_ = zmq::socket_t(HopContext(), zmq::socket_type::rep);
      zap_.set(zmq::sockopt::linger, 0);
      zap_.bind("inproc://zeromq.zap.01");
      front_.set(zmq::sockopt::curve_server, 1);
      front_.set(zmq::sockopt::curve_secretkey, curve_.server_secret);
      front_.set(zmq::sockopt::zap_domain, "sift-worker");
    }
    front_.set(zmq::sockopt::linger, 0);
    front_.set(zmq::sockopt::router_mandatory, 1);  // no silent drops to vanished callers
    front_.set(zmq::sockopt::sndhwm, 0);  // trusted peers; callers bound what is in flight
    try {
      front_.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error("cannot bind " + endpoint + ": " + e.what());
    }
    endpoint_ = front_.get(zmq::sockopt::last_endpoint);
    back_endpoint_ = "inproc://sift-hop-back-" + std::to_string(counter++);
    back_.set(zmq::sockopt::linger, 0);
    back_.bind(back_endpoint_);
  }

  const std::string& endpoint() const { return endpoint_; }

  void Serve(const std::atomic<bool>& stop) {
    zmq::pollitem_t items[] = {{front_.handle(), 0, ZMQ_POLLIN, 0},
                               {back_.handle(), 0, ZMQ_POLLIN, 0},
                               {zap_ ? zap_.handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    Clock::time_point next_heartbeat = Clock::now() + std::chrono::milliseconds(kHeartbeatMs);
    bool stopping = false;
    while (true) {
      PollHop(items, zap_ ? 3 : 2, std::chrono::milliseconds(100));
      if (zap_ && (items[2].revents & ZMQ_POLLIN)) ServeZapRequest(zap_, curve_, auth_log_);
      if (items[0].revents & ZMQ_POLLIN) OnFront();
      // Drain the back channel fully: replies must not wait behind the poll timeout.
      while (true) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(back_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          break;
        }
        OnBack(frames);
      }
      if (Clock::now() >= next_heartbeat) {
        for (auto& [key, task] : tasks_) {
          SendToCaller(*task, MakeHop("heartbeat", {{"hop", task->hop}}));
        }
        next_heartbeat = Clock::now() + std::chrono::milliseconds(kHeartbeatMs);
      }
      if (stop.load() && !stopping) {
        stopping = true;
        for (auto& [key, task] : tasks_) task->cancelled = true;
      }
      if (stopping && tasks_.empty()) break;
    }
  }

 private:
  using Key = std::pair<std::string, uint64_t>;

  void OnFront() {
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(front_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      return;
    }
    if (frames.size() < 2) return;
    const std::string identity = frames[0].to_string();
    HopMessage msg;
    uint64_t hop = 0;
    try {
      msg = ParseHop(frames, 1);
      const nlohmann::json& id = msg.header.at("hop");
      if (!id.is_number_unsigned()) return;  // (a float would convert with undefined behaviour)
      hop = id.get<uint64_t>();
    } catch (const std::exception& e) {
      // Malformed: nothing to route a reply to reliably; drop it (the caller times out).
      return;
    }
    if (msg.type == "cancel") {
      auto it = tasks_.find(Key(identity, hop));
      if (it != tasks_.end()) it->second->cancelled = true;
      return;
    }
    if (msg.type != "run") return;
    auto task = std::make_shared<Task>();
    task->identity = identity;
    task->hop = hop;
    if (!tasks_.emplace(Key(identity, hop), task).second) return;  // duplicate run
    SendToCaller(*task, MakeHop("started", {{"hop", hop}}));
    auto shared = std::make_shared<HopMessage>(std::move(msg));
    pool_.Submit([this, task, shared] { Execute(task, *shared); });
  }

  void OnBack(std::vector<zmq::message_t>& frames) {
    if (frames.size() < 4) return;
    const std::string identity = frames[0].to_string();
    uint64_t hop = 0;
    std::memcpy(&hop, frames[1].data(), std::min(sizeof(hop), frames[1].size()));
    const bool done = frames[3].to_string_view() == "done";
    auto it = tasks_.find(Key(identity, hop));
    std::vector<zmq::message_t> out;
    for (size_t i = 2; i < frames.size(); ++i) out.push_back(std::move(frames[i]));
    if (it != tasks_.end()) SendToCaller(*it->second, std::move(out));
    if (done && it != tasks_.end()) tasks_.erase(it);
  }

  void SendToCaller(Task& task, std::vector<zmq::message_t> frames) {
    std::vector<zmq::message_t> routed;
    routed.emplace_back(task.identity.data(), task.identity.size());
    for (zmq::message_t& m : frames) routed.push_back(std::move(m));
    try {
      if (!zmq::send_multipart(front_, routed, zmq::send_flags::dontwait)) task.cancelled = true;
    } catch (const zmq::error_t&) {
      task.cancelled = true;  // EHOSTUNREACH: the caller is gone
    }
  }

  void Execute(const std::shared_ptr<Task>& task, HopMessage& msg) {
    zmq::socket_t back(HopContext(), zmq::socket_type::push);
    back.set(zmq::sockopt::linger, 5000);  // the loop always reads; never lose a `done`
    back.set(zmq::sockopt::sndhwm, 0);
    back.connect(back_endpoint_);
    RelayContext context(task, back);
    Reply reply;
    try {
      reply = handler_(msg, context);
    } catch (const std::exception& e) {
      reply = Reply(Status(StatusCode::kInternal, "hop_exception", e.what()));
    } catch (...) {
      reply = Reply(Status(StatusCode::kInternal, "hop_exception", "unknown exception"));
    }
    json header = reply.extra;
    header["hop"] = task->hop;
    header["status"] = StatusToJson(reply.status);
    context.Send("done", header, std::move(reply.payload));
  }

  Handler handler_;
  zmq::socket_t front_, back_;
  CurveConfig curve_;        // enabled: the worker port's keys
  zmq::socket_t zap_;        // the ZAP handler's socket when CURVE is on
  PeerLogLimiter auth_log_;  // auth_denied lines, at most one per peer per interval
  std::string endpoint_, back_endpoint_;
  std::map<Key, std::shared_ptr<Task>> tasks_;  // running hops; the Serve thread only
  ElasticPool pool_;  // last: joined first, while the sockets above still exist
};

HopServer::HopServer(const std::string& endpoint, Handler handler, const CurveConfig* curve)
    : impl_(std::make_unique<Impl>(endpoint, std::move(handler), curve)) {}
HopServer::~HopServer() = default;
const std::string& HopServer::endpoint() const { return impl_->endpoint(); }
void HopServer::Serve(const std::atomic<bool>& stop) { impl_->Serve(stop); }

}  // namespace sift::daemon
