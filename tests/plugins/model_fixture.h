// Test-only access to the real model named by $SIFT_MODEL (loaded once per test binary) and the
// catalog helpers the model suites share.
#ifndef SIFT_TESTS_PLUGINS_MODEL_FIXTURE_H_
#define SIFT_TESTS_PLUGINS_MODEL_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "daemon/catalog.h"
#include "sift/model.h"
#include "support/model_path.h"

namespace sift::testing {

inline std::shared_ptr<const Model> TestModel() {
  static std::shared_ptr<const Model> model = []() -> std::shared_ptr<const Model> {
    if (ModelPath().empty()) return nullptr;
    return Model::Load(ModelPath(), ModelOptions());
  }();
  return model;
}

#define SIFT_REQUIRE_MODEL()                                             \
  do {                                                                   \
    if (::sift::testing::TestModel() == nullptr) {                       \
      GTEST_SKIP() << "set SIFT_MODEL to a GGUF model to run this test"; \
    }                                                                    \
  } while (0)

// A catalog over `plugins` and `pipelines` that does not poll and does not log.
inline std::unique_ptr<daemon::Catalog> QuietCatalog(const std::string& plugins,
                                                     const std::string& pipelines) {
  daemon::CatalogOptions options;
  options.plugins_dir = plugins;
  options.pipelines_dir = pipelines;
  options.poll_interval_ms = 0;
  options.log = [](const std::string&, const nlohmann::json&) {};
  return daemon::Catalog::Create(options, TestModel());
}

// A chat prompt long enough for compression to matter (~150 tokens).
inline std::vector<TokenId> TestPrompt(const Model& model) {
  std::string text = "<|im_start|>user\n";
  for (int i = 0; i < 6; ++i) {
    text +=
        "The lighthouse keeper counted ships every evening and wrote their names in a "
        "leather book. ";
  }
  text +=
      "The secret word is apricot. What is the secret word?<|im_end|>\n"
      "<|im_start|>assistant\n";
  return model.tokenizer().Encode(text, true);
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_PLUGINS_MODEL_FIXTURE_H_
