// Test-only StageContext: records progress, yields and streamed text; can cancel itself after a
// given number of emits or refuse further text (a vanished client). Thread-safe enough for the
// pipeline runner, which calls it from the request's thread only.
#ifndef SIFT_TESTS_PLUGINS_TEST_CONTEXT_H_
#define SIFT_TESTS_PLUGINS_TEST_CONTEXT_H_

#include <atomic>
#include <string>
#include <vector>

#include "sift/stage.h"

namespace sift::testing {

class TestContext : public StageContext {
 public:
  int cancel_after_emits = -1;  // -1 = never
  int refuse_after_emits = -1;  // Emit returns false from then on; -1 = never

  bool Cancelled() const override { return cancelled_.load(); }
  Status CancelStatus() const override {
    return Status(StatusCode::kCancelled, "test_cancel", "cancelled by the test");
  }
  void Progress(const std::string& what, int64_t done, int64_t total) override {
    ++progress_calls;
    last_progress = what + " " + std::to_string(done) + "/" + std::to_string(total);
  }
  bool Emit(const std::string& text, TokenId token) override {
    ++emits;
    streamed += text;
    if (cancel_after_emits >= 0 && emits >= cancel_after_emits) cancelled_ = true;
    return refuse_after_emits < 0 || emits < refuse_after_emits;
  }
  void Yield() override { ++yields; }
  void Cancel() { cancelled_ = true; }

  int emits = 0;
  int yields = 0;  // Yield() calls: the points where a host could run other requests' steps
  int progress_calls = 0;
  std::string streamed;
  std::string last_progress;

 private:
  std::atomic<bool> cancelled_{false};
};

}  // namespace sift::testing

#endif  // SIFT_TESTS_PLUGINS_TEST_CONTEXT_H_
