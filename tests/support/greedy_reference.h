// Greedy continuation against a reference fixture (tools/make_reference_fixtures.py's
// greedy.json: prompt_ids, tokens, top2_margins, text), shared by the per-model reference tests.
// fp32 must reproduce every token and the text; bf16 may leave the reference only at a step where
// the reference's top-2 margin is a near-tie (< 2 * bf16_tolerance). Reports through gtest.
#ifndef SIFT_TESTS_SUPPORT_GREEDY_REFERENCE_H_
#define SIFT_TESTS_SUPPORT_GREEDY_REFERENCE_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/generate.h"
#include "sift/model.h"

namespace sift::testing {

inline void ExpectGreedyMatchesReference(const Model& model, const nlohmann::json& fx,
                                         double bf16_tolerance) {
  const std::vector<TokenId> prompt = fx["prompt_ids"];
  const std::vector<TokenId> expected = fx["tokens"];
  const std::vector<double> margins = fx["top2_margins"];
  const at::ScalarType dtype = model.options().dtype;
  KvCache cache = model.NewCache();
  const at::Tensor logits = model.Forward(prompt, 0, cache);
  GenerationOptions g;
  g.max_tokens = static_cast<int64_t>(expected.size());
  g.ignore_eog = true;
  const GenerationResult r = Generate(model, cache, logits, static_cast<int64_t>(prompt.size()), g);
  ASSERT_EQ(r.tokens.size(), expected.size());
  size_t first_diff = 0;
  while (first_diff < expected.size() && r.tokens[first_diff] == expected[first_diff]) ++first_diff;
  if (dtype == at::kFloat) {
    EXPECT_EQ(first_diff, expected.size()) << "fp32 greedy diverged at step " << first_diff;
    EXPECT_EQ(r.text, fx["text"].get<std::string>());
  } else if (first_diff < expected.size()) {
    // bf16 may take the other branch only at a measured near-tie of the reference.
    EXPECT_LT(margins[first_diff], 2 * bf16_tolerance)
        << "bf16 greedy diverged at step " << first_diff << " where the reference margin is "
        << margins[first_diff];
  }
  std::printf("[ %s ] greedy: %zu/%zu tokens equal to the reference\n", DtypeName(dtype),
              first_diff, expected.size());
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_GREEDY_REFERENCE_H_
