#include "sift/op_counter.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "sift/error.h"

namespace sift {
namespace {

struct ThreadCounts {
  bool active = false;
  bool keep_names = false;
  int depth = 0;
  int64_t ops = 0;
  int64_t host_reads = 0;
  std::map<std::string, int64_t> names;
};
thread_local ThreadCounts tls;

std::mutex g_mu;
int g_live = 0;                   // guarded by g_mu
at::CallbackHandle g_handle = 0;  // guarded by g_mu

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  if (!tls.active) return nullptr;
  if (tls.depth++ == 0) {
    ++tls.ops;
    const char* name = fn.name();
    if (std::strcmp(name, "aten::_local_scalar_dense") == 0) ++tls.host_reads;
    if (tls.keep_names) ++tls.names[name];
  }
  return nullptr;
}

void OnEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (tls.active && tls.depth > 0) --tls.depth;
}

}  // namespace

OpCounter::OpCounter(bool keep_names) {
  SIFT_CHECK(!tls.active, "OpCounter: a counter is already live on this thread");
  tls = ThreadCounts{};
  tls.active = true;
  tls.keep_names = keep_names;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live++ == 0) {
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&OnStart, &OnEnd).scopes({at::RecordScope::FUNCTION}));
  }
}

OpCounter::~OpCounter() {
  tls.active = false;
  std::lock_guard<std::mutex> lock(g_mu);
  if (--g_live == 0) at::removeCallback(g_handle);
}

int64_t OpCounter::ops() const { return tls.ops; }
int64_t OpCounter::host_reads() const { return tls.host_reads; }
std::map<std::string, int64_t> OpCounter::by_name() const { return tls.names; }

namespace detail {
void CountHostRead() {
  if (tls.active) ++tls.host_reads;
}
}  // namespace detail

}  // namespace sift
