// sift/device.h (--device parsing) and sift/host.h (reading tensor values on the host).
#include "sift/device.h"

#include <gtest/gtest.h>

#include "sift/error.h"
#include "sift/host.h"

namespace sift {
namespace {

TEST(ParseDevice, CpuAndBadNames) {
  EXPECT_TRUE(ParseDevice("cpu").is_cpu());
  for (const char* bad : {"", "gpu", "CPU", "cuda:x", "cuda:", "mps"}) {
    EXPECT_THROW(ParseDevice(bad), Error) << bad;
  }
  try {
    ParseDevice("gpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected cpu, cuda or cuda:N"), std::string::npos);
  }
}

TEST(ParseDevice, CudaNeedsACudaLibTorch) {
  if (at::hasCUDA()) {
    EXPECT_TRUE(ParseDevice("cuda").is_cuda());
    EXPECT_EQ(ParseDevice("cuda:0").index(), 0);
    EXPECT_THROW(ParseDevice("cuda:4096"), Error);
    return;
  }
  try {
    ParseDevice("cuda");
    FAIL() << "cuda accepted by a LibTorch without CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA support"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParseDevice("cuda:0"), Error);
}

TEST(ToHost, SharesAContiguousCpuTensorAndCopiesOthers) {
  const at::Tensor t = at::arange(12, at::kFloat).view({3, 4});
  EXPECT_EQ(ToHost(t).data_ptr(), t.data_ptr());  // no copy
  const at::Tensor transposed = ToHost(t.t());
  EXPECT_TRUE(transposed.is_contiguous());
  EXPECT_TRUE(transposed.device().is_cpu());
  EXPECT_TRUE(at::equal(transposed, t.t()));
}

TEST(HostInts, ConvertsAndFlattensRowMajor) {
  const at::Tensor t = at::tensor({3, 1, 4, 1, 5, 9}, at::kInt).view({2, 3}).t();  // [3, 2]
  EXPECT_EQ(HostInts(t), (std::vector<int64_t>{3, 1, 1, 5, 4, 9}));
  EXPECT_TRUE(HostInts(at::empty({0}, at::kLong)).empty());
}

TEST(HostInt, OneElementOnly) {
  EXPECT_EQ(HostInt(at::tensor({2.0f, 7.0f}).argmax()), 1);
  EXPECT_DOUBLE_EQ(HostDouble(at::tensor({1.5f}).sum()), 1.5);
  EXPECT_THROW(HostInt(at::tensor({1, 2})), Error);
  EXPECT_THROW(HostDouble(at::empty({0})), Error);
}

}  // namespace
}  // namespace sift
