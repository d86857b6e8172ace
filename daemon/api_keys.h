// ApiKeys: the bearer keys that guard the OpenAI-compatible HTTP port (openai_server.h).
//
// The key file holds one key per line; blank lines and lines starting with '#' are ignored,
// surrounding whitespace is trimmed. Keys are at least 16 bytes of printable ASCII without
// spaces. A request is authorised when its `Authorization: Bearer <key>` names one of them; the
// comparison does not stop at the first differing byte.
//
// THREADING: immutable after Load; Authorizes is safe from any thread.
// ERRORS:    Load returns INVALID_ARGUMENT / api_keys naming the file and the problem.
#ifndef SIFT_DAEMON_API_KEYS_H_
#define SIFT_DAEMON_API_KEYS_H_

#include <string>
#include <string_view>
#include <vector>

#include "sift/status.h"

namespace sift::daemon {

inline constexpr size_t kMinApiKeyBytes = 16;

class ApiKeys {
 public:
  // Reads `path` (at least one key).
  Status Load(const std::string& path);
  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // `authorization`: the Authorization header's value.
  bool Authorizes(std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_API_KEYS_H_
