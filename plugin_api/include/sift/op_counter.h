// OpCounter: counts the LibTorch operators the constructing thread dispatches while it lives.
//
// What a GPU pays per operator (a kernel launch) and per host read (a synchronisation) is
// invisible in CPU timings, so the engine bench reports both counts per prefill layer and per
// decode token. Only top-level operators are counted (an operator called inside another, e.g.
// the matmul inside at::linear, is part of it), and only on the constructing thread (LibTorch's
// worker threads run pieces of the same operator). Host reads are the `item()` calls
// (aten::_local_scalar_dense) plus every sift::ToHost() (sift/host.h).
//
// THREADING: one counter per thread at a time; counters on different threads are independent.
// COST:      registers a global LibTorch RecordFunction callback while any counter lives;
//            nothing when none does.
#ifndef SIFT_OP_COUNTER_H_
#define SIFT_OP_COUNTER_H_

#include <cstdint>
#include <map>
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
};

namespace detail {
// Called by ToHost() (sift/host.h) so counters see host reads that are not item() calls.
void CountHostRead();
}  // namespace detail

}  // namespace sift

#endif  // SIFT_OP_COUNTER_H_
