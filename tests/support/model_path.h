// Test-only: where the model-dependent suites find the default model. tools/setup.sh (the
// README's test command) sets $SIFT_MODEL; a suite without it skips, saying so.
#ifndef SIFT_TESTS_SUPPORT_MODEL_PATH_H_
#define SIFT_TESTS_SUPPORT_MODEL_PATH_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace sift::testing {

// $SIFT_MODEL (the SmolLM2 GGUF file), or "" when it is not set.
inline std::string ModelPath() {
  const char* path = std::getenv("SIFT_MODEL");
  return path != nullptr ? path : "";
}

}  // namespace sift::testing

// Skips the running test when $SIFT_MODEL is not set.
#define SIFT_SKIP_WITHOUT_MODEL()                                       \
  do {                                                                  \
    if (::sift::testing::ModelPath().empty()) {                         \
      GTEST_SKIP() << "SIFT_MODEL is not set (tools/setup.sh sets it)"; \
    }                                                                   \
  } while (0)

#endif  // SIFT_TESTS_SUPPORT_MODEL_PATH_H_
