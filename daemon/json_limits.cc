#include "daemon/json_limits.h"

#include <cstring>

namespace sift::daemon {
namespace {

using json = nlohmann::json;

// nlohmann's own DOM builder behind a gate that counts depth and values as the SAX events
// arrive, and stops the parser (returns false) at the first limit exceeded.
class BoundedDomBuilder : public json::json_sax_t {
 public:
  BoundedDomBuilder(json* out, const JsonLimits& limits)
      : dom_(*out, /*allow_exceptions=*/false), limits_(limits) {}

  const std::string& reason() const { return reason_; }
  const std::string& why() const { return why_; }

  bool null() override { return Value() && dom_.null(); }
  bool boolean(bool v) override { return Value() && dom_.boolean(v); }
  bool number_integer(number_integer_t v) override { return Value() && dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return Value() && dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) override {
    return Value() && dom_.number_float(v, s);
  }
  bool string(string_t& v) override { return Value() && dom_.string(v); }
  bool binary(binary_t& v) override { return Value() && dom_.binary(v); }
  bool start_object(std::size_t n) override { return Open() && dom_.start_object(n); }
  bool key(string_t& k) override { return dom_.key(k); }
  bool end_object() override {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override { return Open() && dom_.start_array(n); }
  bool end_array() override {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    reason_ = "bad_json";
    why_ = e.what();
    (void)position;
    (void)last_token;
    return false;
  }

 private:
  bool Fail(const char* reason, std::string why) {
    reason_ = reason;
    why_ = std::move(why);
    return false;
  }
  bool Value() {
    if (++values_ > limits_.max_values) {
      return Fail("too_many_values",
                  "more than " + std::to_string(limits_.max_values) + " JSON values");
    }
    return true;
  }
  bool Open() {
    if (!Value()) return false;
    if (++containers_ > limits_.max_containers) {
      return Fail("too_many_values",
                  "more than " + std::to_string(limits_.max_containers) + " arrays and objects");
    }
    if (++depth_ > limits_.max_depth) {
      return Fail("too_deep", "nested deeper than " + std::to_string(limits_.max_depth) +
                                  " levels of arrays and objects");
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const JsonLimits& limits_;
  int depth_ = 0;
  size_t values_ = 0, containers_ = 0;
  std::string reason_, why_;
};

}  // namespace

bool ParseBoundedJson(std::string_view text, const JsonLimits& limits, json* out,
                      std::string* reason, std::string* why) {
  *out = json();
  if (text.size() > limits.max_bytes) {
    *reason = "header_too_large";
    *why = std::to_string(text.size()) + " bytes of JSON exceed the limit of " +
           std::to_string(limits.max_bytes);
    return false;
  }
  if (const void* nul = std::memchr(text.data(), '\0', text.size())) {
    *reason = "nul_byte";
    *why = "a NUL byte at offset " + std::to_string(static_cast<const char*>(nul) - text.data()) +
           " (JSON text never contains one)";
    return false;
  }
  BoundedDomBuilder builder(out, limits);
  const bool ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok && builder.reason().empty()) return true;
  *reason = builder.reason().empty() ? "bad_json" : builder.reason();
  *why = builder.why().empty() ? "not valid JSON" : builder.why();
  *out = json();  // what was built so far; within the depth limit, so destroying it is safe
  return false;
}

}  // namespace sift::daemon
