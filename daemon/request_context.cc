#include "daemon/request_context.h"

namespace sift::daemon {

void RequestContext::Progress(const std::string& what, int64_t done, int64_t total) {
  request_->SetProgress(what, done, total);
}

bool RequestContext::Emit(const std::string& text, TokenId token) {
  if (request_->Cancelled()) return false;
  if (token >= 0) {
    if (!first_token_) first_token_ = Clock::now();
    ++tokens_;
    pending_ids_.push_back(token);
  }
  text_ += text;
  if (request_->request.stream && !text.empty()) {
    sink_.Send(request_, ChunkHeader(request_->request.id, seq_++, text, pending_ids_));
    pending_ids_.clear();
  }
  return true;
}

}  // namespace sift::daemon
