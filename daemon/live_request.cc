#include "daemon/live_request.h"

namespace sift::daemon {

Status LiveRequest::CancelStatus() const {
  switch (cause()) {
    case CancelCause::kClient:
      return Status(StatusCode::kCancelled, "client_cancel", "cancelled by the client");
    case CancelCause::kClientGone:
      return Status(StatusCode::kCancelled, "client_gone", "the client went away");
    case CancelCause::kShutdown:
      return Status(StatusCode::kUnavailable, "shutting_down",
                    "the daemon is shutting down; retry on another instance");
    case CancelCause::kDeadline:
    case CancelCause::kNone:
      break;
  }
  return Status(StatusCode::kDeadlineExceeded, "deadline",
                "deadline of " + std::to_string(request.deadline_ms) + " ms exceeded");
}

void LiveRequest::SetProgress(const std::string& what, int64_t done, int64_t total) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  progress_ = {{"what", what}, {"done", done}, {"total", total}};
}

nlohmann::json LiveRequest::Progress() const {
  std::lock_guard<std::mutex> lock(progress_mu_);
  return progress_;
}

}  // namespace sift::daemon
