#include "daemon/pipeline_config.h"

#include <toml++/toml.h>
#include <filesystem>
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

StageConfig ParseStage(const std::string& file, const toml::table& t, size_t index) {
  StageConfig s;
  s.where = At(file, t);
  const std::string context = "stage " + std::to_string(index + 1) + ": ";
  RejectUnknownKeys(file, t, {"name", "plugin", "endpoint", "params"}, context);
  const toml::node* plugin = t.get("plugin");
  if (plugin == nullptr) Fail(s.where, context + "missing key 'plugin'");
  if (!plugin->is_string() || plugin->as_string()->get().empty()) {
    Fail(At(file, *plugin), context + "key 'plugin' must be a plugin name");
  }
  s.plugin = plugin->as_string()->get();
  s.label = OptionalString(file, t, "name", s.plugin, context);
  if (!ValidLabel(s.label)) {
    Fail(At(file, *t.get("name")), context + "key 'name' must be [A-Za-z0-9_.-]+");
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
    Fail(At(file, *root.get("name")), "key 'name' must be [A-Za-z0-9_.-]+");
  }
  config.description = OptionalString(file, root, "description", "", "");
  config.model_defaults = LoadModelDefaults(ModelDefaultsDir(file));
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

// The kind-order rule for stage i; "" when legal.
std::string OrderProblem(const std::vector<StageKind>& kinds, size_t i) {
  const StageKind kind = kinds[i];
  const bool first = i == 0, last = i + 1 == kinds.size();
  const StageKind prev = first ? StageKind::kPrefill : kinds[i - 1];
  if (first && kind != StageKind::kPrefill) return "the first stage must be a prefill";
  switch (kind) {
    case StageKind::kPrefill:
      if (!first && prev != StageKind::kFilter) {
        return "a prefill must be the first stage or come right after a filter";
      }
      break;
    case StageKind::kFilter:
      if (prev != StageKind::kPrefill) return "a filter must come right after a prefill";
      if (last || kinds[i + 1] != StageKind::kPrefill) {
        return "a filter must be followed by a prefill (it replaces the prompt and clears the "
               "cache)";
      }
      break;
    case StageKind::kSelect:
      if (prev == StageKind::kFilter) return "a select must come after a prefill, select or reuse";
      break;
    case StageKind::kReuse:
      if (prev != StageKind::kSelect) return "a reuse must come right after a select";
      break;
    case StageKind::kDecode:
      if (!last) return "the decode stage must be the last stage";
      break;
  }
  if (last && kind != StageKind::kDecode) {
    return std::string("the last stage must be a decode, not a ") + StageKindName(kind);
  }
  return "";
}

}  // namespace

PipelineConfig ParsePipelineFile(const std::string& path) {
  try {
    return Parse(toml::parse_file(path), path);
  } catch (const toml::parse_error& e) {
    throw Error(path + ":" + std::to_string(e.source().begin.line) + ": " +
                std::string(e.description()));
  }
}

PipelineConfig ParsePipelineText(const std::string& text, const std::string& path) {
  try {
    return Parse(toml::parse(text, path), path);
  } catch (const toml::parse_error& e) {
    throw Error(path + ":" + std::to_string(e.source().begin.line) + ": " +
                std::string(e.description()));
  }
}

std::vector<ResolvedStage> ValidatePipeline(const PipelineConfig& config, const PluginMap& plugins,
                                            const Model* model) {
  std::vector<ResolvedStage> resolved;
  std::vector<StageKind> kinds;
  for (const StageConfig& stage : config.stages) {
    auto it = plugins.find(stage.plugin);
    if (it == plugins.end()) {
      std::string known;
      for (const auto& [name, plugin] : plugins) known += (known.empty() ? "" : ", ") + name;
      Fail(stage.where, "stage '" + stage.label + "': unknown plugin '" + stage.plugin +
                            "' (known: " + (known.empty() ? "none" : known) + ")");
    }
    resolved.push_back(ResolvedStage{stage, it->second});
    kinds.push_back(it->second->kind());
  }
  // The loaded model's defaults (model_defaults.h) fill the keys the file does not set; they
  // become part of the stage's parameters, so remote hops carry them too.
  if (const ModelDefaults* defaults =
          model != nullptr ? MatchModelDefaults(config.model_defaults, model->config()) : nullptr) {
    for (ResolvedStage& stage : resolved) {
      ApplyModelDefaults(*defaults, stage.config.plugin, &stage.config.params);
    }
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string problem = OrderProblem(kinds, i);
    if (!problem.empty()) {
      const StageConfig& s = config.stages[i];
      Fail(s.where, "stage '" + s.label + "' (" + StageKindName(kinds[i]) + " " + s.plugin +
                        "): " + problem);
    }
  }
  if (model != nullptr) {
    for (const ResolvedStage& stage : resolved) {
      InstantiateStage(stage, json::object(), *model);
    }
  }
  return resolved;
}

StageHandle InstantiateStage(const ResolvedStage& stage, const json& overrides,
                             const Model& model) {
  StageParams params = stage.config.params;
  if (!overrides.is_null()) {
    SIFT_CHECK(overrides.is_object(), "request: stage '", stage.config.label,
               "': overrides must be an object of parameters");
    for (const auto& [key, value] : overrides.items()) params.Set(key, value, "request");
  }
  StageHandle handle = stage.plugin->CreateStage(params, model);
  const std::vector<std::string> unread = params.UnreadKeys();
  if (!unread.empty()) {
    params.Fail(unread.front(), "unknown parameter (" + stage.plugin->id() + " does not read it)");
  }
  return handle;
}

}  // namespace sift::daemon
