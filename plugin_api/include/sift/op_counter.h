// OpCounter: counts the LibTorch operators dispatched on the constructing thread, and on threads
// that adopt its LibTorch thread-local state (at::ThreadLocalStateGuard: the daemon's hop
// executor runs in-process stages so), while it lives.
//
// What a GPU pays per operator (a kernel launch) and per host read (a synchronisation) is
// invisible in CPU timings, so the benches report both counts per prefill layer and per
// decode token. Only top-level operators are counted (an operator called inside another, e.g.
// the matmul inside at::linear, is part of it); LibTorch's intra-op worker threads, which run
// pieces of the same operator, do not adopt the state and are not counted. Host reads are the
// `item()` calls (aten::_local_scalar_dense) plus every sift::ToHost() (sift/host.h).
// The counter travels as c10::ThreadLocalDebugInfo (kind PRODUCER_INFO), which LibTorch
// propagates with the rest of its thread-local state.
//
// THREADING: one counter per thread at a time (constructed and destroyed on that thread);
//            counts may be read while adopting threads run.
// COST:      registers a global LibTorch RecordFunction callback while any counter lives;
//            nothing when none does.
#ifndef SIFT_OP_COUNTER_H_
#define SIFT_OP_COUNTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace sift {

class OpCounter {
 public:
  // keep_names: also count per operator name (for the bench's breakdown; slower).
  explicit OpCounter(bool keep_names = false);
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  int64_t ops() const;         // top-level operators so far
  int64_t host_reads() const;  // item() calls + ToHost() calls so far
  // Operator name -> count (empty unless keep_names).
  std::map<std::string, int64_t> by_name() const;

  struct State;  // op_counter.cc: the counts, carried by the threads' debug info

 private:
  struct Guard;
  std::shared_ptr<State> state_;
  std::unique_ptr<Guard> guard_;
};

namespace detail {
// Called by ToHost() (sift/host.h) so counters see host reads that are not item() calls.
void CountHostRead();
}  // namespace detail

}  // namespace sift

#endif  // SIFT_OP_COUNTER_H_
