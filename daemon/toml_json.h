// TOML values to JSON, for stage parameters read from pipeline files and model defaults files.
//
// THREADING: pure function. ERRORS: throws sift::Error "file:line: parameter 'key': ..." for
// dates and times, which parameters cannot hold.
#ifndef SIFT_DAEMON_TOML_JSON_H_
#define SIFT_DAEMON_TOML_JSON_H_

#include <toml++/toml.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sift/error.h"

namespace sift::daemon {

inline nlohmann::json TomlToJson(const std::string& file, const toml::node& node,
                                 const std::string& key) {
  if (auto v = node.as_integer()) return v->get();
  if (auto v = node.as_floating_point()) return v->get();
  if (auto v = node.as_boolean()) return v->get();
  if (auto v = node.as_string()) return v->get();
  if (auto a = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const toml::node& e : *a) out.push_back(TomlToJson(file, e, key));
    return out;
  }
  if (auto t = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto&& [k, v] : *t) out[std::string(k.str())] = TomlToJson(file, v, key);
    return out;
  }
  throw Error(file + ":" + std::to_string(node.source().begin.line) + ": parameter '" + key +
              "': dates and times are not supported");
}

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_TOML_JSON_H_
