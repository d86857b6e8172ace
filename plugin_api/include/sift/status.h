// Status: the result of an operation that can fail on the data plane (a stage run, a request).
//
// Codes follow gRPC's canonical set; `reason` is a stable machine slug ("queue_full",
// "prompt_too_long"); `message` is for humans. Stages return Status instead of throwing.
#ifndef SIFT_STATUS_H_
#define SIFT_STATUS_H_

#include <string>
#include <utility>

namespace sift {

enum class StatusCode {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kInternal,
  kUnavailable,
};

// "CANCELLED", "INVALID_ARGUMENT", ... as used on the wire.
const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string reason, std::string message)
      : code_(code), reason_(std::move(reason)), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& reason() const { return reason_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string reason_;
  std::string message_;
};

}  // namespace sift

#define SIFT_RETURN_IF_ERROR(expr) \
  do {                             \
    ::sift::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

#endif  // SIFT_STATUS_H_
