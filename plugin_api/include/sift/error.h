// sift::Error: the one exception type the runtime library throws.
//
// The runtime (GGUF, tokenizer, model) reports failures by throwing sift::Error with a message
// that names the thing that failed (file, tensor, key) and why. Code at a boundary (plugin shims,
// the daemon's request loop) catches it and turns it into a status or a protocol error; no
// exception ever crosses a plugin boundary.
#ifndef SIFT_ERROR_H_
#define SIFT_ERROR_H_

#include <sstream>
#include <stdexcept>
#include <string>

namespace sift {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string Concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace sift

// Throws sift::Error with the streamed message when `cond` is false.
#define SIFT_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) throw ::sift::Error(::sift::detail::Concat(__VA_ARGS__)); \
  } while (0)

#endif  // SIFT_ERROR_H_
