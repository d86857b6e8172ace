#include "sift/op_counter.h"

#include <ATen/record_function.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "sift/error.h"

namespace sift {

// What a counter has seen; shared by every thread that carries it in its debug info.
struct OpCounter::State : c10::DebugInfoBase {
  explicit State(bool names) : keep_names(names) {}
  const bool keep_names;
  std::atomic<int64_t> ops{0};
  std::atomic<int64_t> host_reads{0};
  std::mutex mu;
  std::map<std::string, int64_t> names;  // guarded by mu
};

// Pushes the state as this thread's debug info for the counter's lifetime.
struct OpCounter::Guard {
  explicit Guard(std::shared_ptr<c10::DebugInfoBase> info)
      : guard(c10::DebugInfoKind::PRODUCER_INFO, std::move(info)) {}
  c10::DebugInfoGuard guard;
};

namespace {

constexpr c10::DebugInfoKind kKind = c10::DebugInfoKind::PRODUCER_INFO;

OpCounter::State* Current() {
  return dynamic_cast<OpCounter::State*>(c10::ThreadLocalDebugInfo::get(kKind));
}

thread_local int tls_depth = 0;         // nesting of counted operators on this thread
thread_local const char* tls_top = "";  // the top-level operator running on this thread

std::mutex g_mu;
int g_live = 0;                   // guarded by g_mu
at::CallbackHandle g_handle = 0;  // guarded by g_mu

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  OpCounter::State* s = Current();
  if (s == nullptr) return nullptr;
  const char* name = fn.name();
  if (tls_depth == 0) tls_top = name;
  // A device-to-host read at any depth (item() calls it inside aten::item) synchronises.
  if (std::strcmp(name, "aten::_local_scalar_dense") == 0) {
    s->host_reads.fetch_add(1, std::memory_order_relaxed);
    if (s->keep_names) {
      std::lock_guard<std::mutex> lock(s->mu);
      ++s->names[std::string("host read in ") + tls_top];
    }
  }
  if (tls_depth++ == 0) {
    s->ops.fetch_add(1, std::memory_order_relaxed);
    if (s->keep_names) {
      std::lock_guard<std::mutex> lock(s->mu);
      ++s->names[name];
    }
  }
  return nullptr;
}

void OnEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (tls_depth > 0 && Current() != nullptr) --tls_depth;
}

}  // namespace

OpCounter::OpCounter(bool keep_names) : state_(std::make_shared<State>(keep_names)) {
  SIFT_CHECK(Current() == nullptr, "OpCounter: a counter is already live on this thread");
  guard_ = std::make_unique<Guard>(state_);
  tls_depth = 0;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live++ == 0) {
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&OnStart, &OnEnd).scopes({at::RecordScope::FUNCTION}));
  }
}

OpCounter::~OpCounter() {
  guard_.reset();
  std::lock_guard<std::mutex> lock(g_mu);
  if (--g_live == 0) at::removeCallback(g_handle);
}

int64_t OpCounter::ops() const { return state_->ops.load(); }
int64_t OpCounter::host_reads() const { return state_->host_reads.load(); }
std::map<std::string, int64_t> OpCounter::by_name() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->names;
}

namespace detail {
void CountHostRead() {
  if (OpCounter::State* s = Current()) s->host_reads.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace sift
