// Bounded JSON parsing for input from untrusted peers (client headers, stage-hop headers).
//
// ParseBoundedJson checks the text and builds the document in one pass, refusing, while it
// parses and before any allocation proportional to the input, a document that
//   - is larger than max_bytes (checked before parsing starts),
//   - contains a NUL byte anywhere (nlohmann's lexer would stop there and ignore the rest),
//   - nests arrays/objects deeper than max_depth (a deep tree would overflow the stack later,
//     in any recursive copy or dump),
//   - has more than max_values values in total (scalars, arrays, objects; keys not counted) or
//     more than max_containers arrays and objects (an empty array costs ~60 bytes of memory
//     for 3 bytes of input),
//   - is not valid UTF-8 JSON (nlohmann validates UTF-8 inside strings; outside strings JSON is
//     ASCII), or has anything but whitespace after the value.
// The partial document built up to the refusal is destroyed before returning (its depth is
// within the limit).
//
// THREADING: pure function.
// ERRORS:    returns false with `why` set ("nested deeper than 64 levels", ...) and `reason` a
//            slug: header_too_large, too_deep, too_many_values, nul_byte or bad_json.
#ifndef SIFT_DAEMON_JSON_LIMITS_H_
#define SIFT_DAEMON_JSON_LIMITS_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sift::daemon {

struct JsonLimits {
  size_t max_bytes = size_t{8} << 20;
  int max_depth = 64;
  size_t max_values = size_t{1} << 20;
  size_t max_containers = size_t{1} << 16;
};

bool ParseBoundedJson(std::string_view text, const JsonLimits& limits, nlohmann::json* out,
                      std::string* reason, std::string* why);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_JSON_LIMITS_H_
