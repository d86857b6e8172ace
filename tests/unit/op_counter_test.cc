// OpCounter: top-level LibTorch operators and host reads on the counting thread and on threads
// that adopt its thread-local state (as the daemon's hop executor does), not on others.
#include "sift/op_counter.h"

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <gtest/gtest.h>

#include <thread>

#include "sift/host.h"

namespace sift {
namespace {

TEST(OpCounterTest, CountsTopLevelOperatorsAndHostReads) {
  const at::Tensor a = at::ones({4, 4});
  OpCounter counter(/*keep_names=*/true);
  at::Tensor b = at::add(a, a);  // one operator
  at::Tensor c = at::mm(b, a);   // one operator, whatever it calls inside
  EXPECT_EQ(counter.ops(), 2);
  EXPECT_EQ(counter.host_reads(), 0);
  EXPECT_EQ(c.sum().item<float>(), 128.0f);  // sum + item (a host read)
  EXPECT_EQ(counter.ops(), 4);
  EXPECT_EQ(counter.host_reads(), 1);
  EXPECT_EQ(counter.by_name().at("aten::add"), 1);
}

TEST(OpCounterTest, FollowsThreadsThatAdoptTheState) {
  const at::Tensor a = at::ones({8});
  OpCounter counter;
  const at::ThreadLocalState captured;
  std::thread adopting([&] {
    at::ThreadLocalStateGuard guard(captured);
    at::Tensor b = at::mul(a, a);
    (void)ToHost(b);  // a host read, counted by sift::ToHost
  });
  adopting.join();
  const int64_t after_adopting = counter.ops();
  EXPECT_GE(after_adopting, 1);
  EXPECT_EQ(counter.host_reads(), 1);
  std::thread plain([&] { at::Tensor b = at::mul(a, a); });
  plain.join();
  EXPECT_EQ(counter.ops(), after_adopting);
}

TEST(OpCounterTest, CountsNothingOnceGoneAndRefusesNesting) {
  const at::Tensor a = at::ones({2});
  {
    OpCounter counter;
    EXPECT_THROW(OpCounter inner, std::exception);
    at::Tensor b = at::add(a, a);
    EXPECT_EQ(counter.ops(), 1);
  }
  OpCounter fresh;
  EXPECT_EQ(fresh.ops(), 0);
}

}  // namespace
}  // namespace sift
