#include "sift/sampler.h"

#include <gtest/gtest.h>

#include <map>

namespace sift {
namespace {

TEST(SamplerTest, GreedyIsArgmax) {
  Sampler s({});
  EXPECT_EQ(s.Sample(at::tensor({0.1f, 3.0f, 2.9f, -1.0f})), 1);
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  SamplingOptions o;
  o.temperature = 5.0;
  o.top_k = 1;
  Sampler s(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.Sample(at::tensor({0.1f, 3.0f, 2.9f})), 1);
}

TEST(SamplerTest, SeedMakesSamplingReproducible) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 42;
  at::Tensor logits = at::zeros({100});
  Sampler a(o), b(o);
  std::vector<TokenId> xa, xb;
  for (int i = 0; i < 30; ++i) {
    xa.push_back(a.Sample(logits));
    xb.push_back(b.Sample(logits));
  }
  EXPECT_EQ(xa, xb);
  EXPECT_GT(std::set<TokenId>(xa.begin(), xa.end()).size(), 10u);  // really random
}

TEST(SamplerTest, FrequenciesFollowTemperatureSoftmax) {
  // p = softmax([0, ln 3]) = [0.25, 0.75]; 4000 draws: std of the count is ~27.
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 7;
  Sampler s(o);
  at::Tensor logits = at::tensor({0.0f, std::log(3.0f)});
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += s.Sample(logits);
  EXPECT_NEAR(ones, 3000, 150);
}

TEST(SamplerTest, TopPKeepsTheSmallestSufficientPrefix) {
  // probs ~ [0.6, 0.3, 0.1]: top_p 0.5 keeps only the first; 0.8 keeps two, never the third.
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_p = 0.5;
  o.seed = 3;
  at::Tensor logits = at::log(at::tensor({0.6f, 0.3f, 0.1f}));
  Sampler a(o);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Sample(logits), 0);
  o.top_p = 0.8;
  Sampler b(o);
  std::map<TokenId, int> seen;
  for (int i = 0; i < 500; ++i) seen[b.Sample(logits)]++;
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2), 0u);
}

TEST(SamplerTest, InvalidOptionsThrow) {
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_p = 0.0;
  Sampler s(o);
  EXPECT_THROW(s.Sample(at::zeros({3})), std::exception);
}

}  // namespace
}  // namespace sift
