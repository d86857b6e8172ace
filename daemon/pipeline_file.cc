#include "daemon/pipeline_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "daemon/toml_json.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

std::string At(const std::string& file, const toml::node& node) {
  return file + ":" + std::to_string(node.source().begin.line);
}

[[noreturn]] void Fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
}

bool ValidLabel(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

void RejectUnknownKeys(const std::string& file, const toml::table& table,
                       const std::set<std::string>& allowed, const std::string& context) {
  for (auto&& [key, node] : table) {
    if (allowed.count(std::string(key.str())) == 0) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      Fail(At(file, node),
           context + "unknown key '" + std::string(key.str()) + "' (expected: " + list + ")");
    }
  }
}

// An optional string value of `table`.
std::string OptionalString(const std::string& file, const toml::table& table, const char* key,
                           const std::string& fallback, const std::string& context) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  if (!node->is_string()) Fail(At(file, *node), context + "key '" + key + "' must be a string");
  return node->as_string()->get();
}

// 40 characters of the Z85 alphabet (ZeroMQ RFC 32): a CURVE key as text.
bool Z85Key(const std::string& text) {
  static const std::string kAlphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  return text.size() == 40 && text.find_first_not_of(kAlphabet) == std::string::npos;
}

StageConfig ParseStage(const std::string& file, const toml::table& t, size_t index) {
  StageConfig s;
  s.where = At(file, t);
  const std::string context = "stage " + std::to_string(index + 1) + ": ";
  RejectUnknownKeys(file, t, {"name", "plugin", "endpoint", "worker_key", "params"}, context);
  const toml::node* plugin = t.get("plugin");
  if (plugin == nullptr) Fail(s.where, context + "missing key 'plugin'");
  if (!plugin->is_string() || plugin->as_string()->get().empty()) {
    Fail(At(file, *plugin), context + "key 'plugin' must be a plugin name");
  }
  s.plugin = plugin->as_string()->get();
  s.label = OptionalString(file, t, "name", s.plugin, context);
  if (!ValidLabel(s.label)) {
    // Without a 'name' the label is the plugin's name, which must then be a valid label itself.
    const toml::node* name = t.get("name");
    Fail(name != nullptr ? At(file, *name) : s.where,
         context + (name != nullptr ? "key 'name'" : "the plugin name (the stage's default name)") +
             " must be [A-Za-z0-9_.-]+");
  }
  const std::string in_stage = "stage '" + s.label + "': ";
  s.endpoint = OptionalString(file, t, "endpoint", "", in_stage);
  if (!s.endpoint.empty()) {
    const size_t colon = s.endpoint.rfind(':');
    if (s.endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon < 7 ||
        colon + 1 == s.endpoint.size()) {
      Fail(At(file, *t.get("endpoint")),
           in_stage + "key 'endpoint' must look like \"tcp://host:port\", got \"" + s.endpoint +
               "\"");
    }
  }
  s.worker_key = OptionalString(file, t, "worker_key", "", in_stage);
  if (!s.worker_key.empty()) {
    if (s.endpoint.empty()) {
      Fail(At(file, *t.get("worker_key")), in_stage + "key 'worker_key' needs an 'endpoint'");
    }
    if (!Z85Key(s.worker_key)) {
      Fail(At(file, *t.get("worker_key")),
           in_stage +
               "key 'worker_key' must be the worker's CURVE public key: 40 Z85 "
               "characters (the .pub file of siftd --make-curve-keys)");
    }
  }
  s.params = StageParams(file, s.label, s.plugin);
  if (const toml::node* params = t.get("params")) {
    const toml::table* table = params->as_table();
    if (table == nullptr) Fail(At(file, *params), in_stage + "key 'params' must be a table");
    for (auto&& [key, value] : *table) {
      const std::string k(key.str());
      s.params.Set(k, TomlToJson(file, value, k), At(file, value));
    }
  }
  return s;
}

PipelineConfig Parse(const toml::table& root, const std::string& file) {
  PipelineConfig config;
  config.file = file;
  RejectUnknownKeys(file, root, {"name", "description", "model", "stage"}, "");
  config.name = OptionalString(file, root, "name", std::filesystem::path(file).stem().string(), "");
  if (!ValidLabel(config.name)) {
    // Without a 'name' the pipeline is named after its file, whose stem must then be valid.
    const toml::node* name = root.get("name");
    Fail(name != nullptr ? At(file, *name) : At(file, root),
         std::string(name != nullptr ? "key 'name'"
                                     : "the file name (the pipeline's default name)") +
             " must be [A-Za-z0-9_.-]+");
  }
  config.description = OptionalString(file, root, "description", "", "");
  config.model = OptionalString(file, root, "model", "default", "");
  if (config.model != "default") {
    Fail(At(file, *root.get("model")),
         "key 'model': unknown model '" + config.model + "' (this siftd serves \"default\")");
  }
  const toml::node* stages = root.get("stage");
  if (stages == nullptr) Fail(file + ":1", "no stages: add [[stage]] tables");
  const toml::array* array = stages->as_array();
  if (array == nullptr || array->empty()) {
    Fail(At(file, *stages), "'stage' must be an array of tables ([[stage]])");
  }
  std::set<std::string> labels;
  for (size_t i = 0; i < array->size(); ++i) {
    const toml::node& node = *array->get(i);
    const toml::table* table = node.as_table();
    if (table == nullptr) Fail(At(file, node), "'stage' must be an array of tables ([[stage]])");
    StageConfig stage = ParseStage(file, *table, i);
    if (!labels.insert(stage.label).second) {
      Fail(stage.where, "stage '" + stage.label +
                            "': a stage with this name already exists (set distinct 'name's)");
    }
    config.stages.push_back(std::move(stage));
  }
  return config;
}

// toml++ 3.3.0 (Debian bookworm's) reaches TOML_UNREACHABLE, i.e. undefined behaviour, in its
// whitespace test for these code points (found by tests/fuzz/fuzz_pipeline_toml).
bool MishandledByToml(uint32_t c) {
  return (c >= 0xA1 && c <= 0x499) || (c >= 0x2C5E && c <= 0x3057 && c != 0x3000) ||
         (c >= 0xFB26 && c <= 0xFEFE);
}

// The code point of the UTF-8 sequence at text[i] (its length in *len), or 0 with *len 1 for
// a byte that starts no valid sequence (toml++ then reports the bad UTF-8 itself).
uint32_t DecodeAt(const std::string& text, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  *len = 1;
  if (n == 0 || i + n > text.size()) return 0;
  uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(text[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  *len = n;
  return cp;
}

// toml++ applies that test to every character except inside comments and inside single-line
// strings that are values (not keys). So before it sees the text, such characters anywhere
// else are refused with an error naming the line (valid TOML loses only non-ASCII characters
// in keys and multi-line strings, which can be written as \\uXXXX escapes). A string counts as
// a value only when it is closed on its line, follows '=', '[', ',' or '{' and is not followed
// by '=', '.' or ']' (a key); anything else is checked character by character.
void CheckCharacters(const std::string& text, const std::string& path) {
  size_t line = 1;
  auto refuse = [&](uint32_t cp) {
    char code[16];
    std::snprintf(code, sizeof(code), "U+%04X", static_cast<unsigned>(cp));
    Fail(path + ":" + std::to_string(line),
         std::string("character ") + code +
             " is only allowed in comments and in single-line string values (write it as a "
             "\\u escape elsewhere)");
  };
  const size_t n = text.size();
  char prev = '\n';  // the last character outside comments, strings and whitespace
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
      continue;
    }
    const bool quote = c == '"' || c == '\'';
    if (quote && text.compare(i, 3, std::string(3, c)) != 0) {
      size_t j = i + 1;
      while (j < n && text[j] != c && text[j] != '\n') j += (c == '"' && text[j] == '\\') ? 2 : 1;
      const bool closed = j < n && text[j] == c;
      size_t k = std::min(j + 1, n);
      while (k < n && (text[k] == ' ' || text[k] == '\t')) ++k;
      const bool key = k < n && (text[k] == '=' || text[k] == '.' || text[k] == ']');
      const bool value =
          closed && !key && (prev == '=' || prev == '[' || prev == ',' || prev == '{');
      for (size_t p = i + 1; p < j && p < n;) {
        size_t len = 1;
        const uint32_t cp = DecodeAt(text, p, &len);
        const bool escaped = c == '"' && text[p - 1] == '\\';
        if ((!value || escaped) && MishandledByToml(cp)) refuse(cp);
        p += len;
      }
      prev = c;
      i = closed ? j + 1 : std::min(j, n);
      continue;
    }
    size_t len = 1;
    const uint32_t cp = DecodeAt(text, i, &len);
    if (MishandledByToml(cp)) refuse(cp);
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') prev = c;
    i += len;
  }
}

}  // namespace

PipelineConfig ParsePipelineFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(path, "cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return ParsePipelineText(text.str(), path);
}

PipelineConfig ParsePipelineText(const std::string& text, const std::string& path) {
  CheckCharacters(text, path);
  try {
    return Parse(toml::parse(text, path), path);
  } catch (const toml::parse_error& e) {
    throw Error(path + ":" + std::to_string(e.source().begin.line) + ": " +
                std::string(e.description()));
  }
}

}  // namespace sift::daemon
