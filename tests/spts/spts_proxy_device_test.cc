// SptsProxy and devices (no model): a proxy placed with To(device) has every tensor there,
// Norms refuses hidden states on another device with an error naming the fix, and
// LoadShared(path, device) keeps one copy per file and device. The meta device (shapes only,
// on every LibTorch) stands in for a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sift/error.h"
#include "spts_proxy.h"
#include "support/temp_dir.h"

namespace sift::plugins {
namespace {

SptsProxy TinyProxy() {
  const int64_t hidden = 4, rank = 2, d_low = 3;
  SptsProxy p;
  p.header = {{"model", {{"name", "tiny"}}}};
  SptsLayerProxy l;
  l.channels = at::arange(d_low, at::kLong);
  l.gate_u = at::randn({hidden, rank});
  l.gate_v = at::randn({rank, d_low});
  l.up_u = at::randn({hidden, rank});
  l.up_v = at::randn({rank, d_low});
  l.down_u = at::randn({hidden, rank});
  l.down_v = at::randn({rank, d_low});
  p.layers.push_back(l);
  return p;
}

TEST(SptsProxyDevice, ToPlacesEveryTensor) {
  const SptsProxy cpu = TinyProxy();
  const SptsProxy meta = cpu.To(at::Device(at::kMeta));
  const SptsLayerProxy& l = meta.layers.at(0);
  for (const at::Tensor* t :
       {&l.channels, &l.gate_u, &l.gate_v, &l.up_u, &l.up_v, &l.down_u, &l.down_v}) {
    EXPECT_TRUE(t->is_meta());
  }
  EXPECT_TRUE(cpu.layers[0].gate_u.device().is_cpu());  // the original is untouched
  EXPECT_EQ(meta.d_low(), 3);
  EXPECT_EQ(meta.rank(), 2);
}

TEST(SptsProxyDevice, NormsRefusesHiddenStatesOnAnotherDevice) {
  const SptsProxy cpu = TinyProxy();
  EXPECT_EQ(cpu.Norms(0, at::randn({5, 4})).sizes().vec(), std::vector<int64_t>{5});
  const SptsProxy meta = cpu.To(at::Device(at::kMeta));
  try {
    meta.Norms(0, at::randn({5, 4}));
    FAIL() << "a proxy on meta accepted CPU hidden states";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("LoadShared(path, model device)"), std::string::npos)
        << e.what();
  }
}

TEST(SptsProxyDevice, LoadSharedKeepsOneCopyPerDevice) {
  sift::testing::TempDir dir;
  const std::string path = dir.path() + "/tiny.spts.bin";
  TinyProxy().Save(path);
  const auto cpu_a = SptsProxy::LoadShared(path);
  const auto cpu_b = SptsProxy::LoadShared(path, at::Device(at::kCPU));
  const auto meta = SptsProxy::LoadShared(path, at::Device(at::kMeta));
  EXPECT_EQ(cpu_a.get(), cpu_b.get());
  EXPECT_NE(cpu_a.get(), meta.get());
  EXPECT_TRUE(cpu_a->layers[0].down_v.device().is_cpu());
  EXPECT_TRUE(meta->layers[0].down_v.is_meta());
  EXPECT_TRUE(at::equal(cpu_a->layers[0].channels, at::arange(3, at::kLong)));
}

}  // namespace
}  // namespace sift::plugins
