// RequestContext: the daemon's sift::StageContext for one running request.
//
//   Cancelled()/CancelStatus()  the request's atomic cancel cause and its deadline
//   Progress()                  stored on the request; the front end sends it in the next
//                               heartbeat (at most one per --heartbeat-ms while no other
//                               message goes out), so any call rate is fine
//   Emit()                      appends to the text kept for `final`; when streaming, sends a
//                               `chunk` per non-empty piece (ids of tokens whose text is still
//                               held back ride along with the next piece); returns false once
//                               the request is cancelled or the client is gone
//
// It also records when the first token was emitted (TTFT).
//
// THREADING: used by the one worker thread running the request (stages run sequentially).
#ifndef SIFT_DAEMON_REQUEST_CONTEXT_H_
#define SIFT_DAEMON_REQUEST_CONTEXT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/live_request.h"
#include "sift/stage.h"

namespace sift::daemon {

class RequestContext final : public StageContext {
 public:
  RequestContext(std::shared_ptr<LiveRequest> request, ReplySink& sink)
      : request_(std::move(request)), sink_(sink) {}

  bool Cancelled() const override { return request_->Cancelled(); }
  Status CancelStatus() const override { return request_->CancelStatus(); }
  void Progress(const std::string& what, int64_t done, int64_t total) override;
  bool Emit(const std::string& text, TokenId token) override;

  const std::string& text() const { return text_; }
  int64_t tokens_emitted() const { return tokens_; }
  int64_t chunks_sent() const { return seq_; }
  std::optional<Clock::time_point> first_token_time() const { return first_token_; }

 private:
  std::shared_ptr<LiveRequest> request_;
  ReplySink& sink_;
  std::string text_;
  std::vector<int32_t> pending_ids_;  // tokens not yet sent in a chunk
  int64_t tokens_ = 0;
  int64_t seq_ = 0;
  std::optional<Clock::time_point> first_token_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_REQUEST_CONTEXT_H_
