#include "daemon/pipeline_config.h"

#include "daemon/model_defaults.h"

#include "sift/error.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
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
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string problem = OrderProblem(kinds, i);
    if (!problem.empty()) {
      const StageConfig& s = config.stages[i];
      Fail(s.where, "stage '" + s.label + "' (" + StageKindName(kinds[i]) + " " + s.plugin +
                        "): " + problem);
    }
  }
  // The loaded model's defaults (<folder of the file>/models, model_defaults.h) fill the keys the
  // file does not set; they become part of the stage's parameters, so remote hops carry them too.
  if (model != nullptr) {
    const std::vector<ModelDefaults> all = LoadModelDefaults(ModelDefaultsDir(config.file));
    if (const ModelDefaults* defaults = MatchModelDefaults(all, model->config())) {
      for (ResolvedStage& stage : resolved) {
        ApplyModelDefaults(*defaults, stage.config.plugin, &stage.config.params);
      }
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
    for (const auto& [key, value] : overrides.items())
      params.Set(key, value, StageParams::kRequestOrigin);
  }
  StageHandle handle = stage.plugin->CreateStage(params, model);
  const std::vector<std::string> unread = params.UnreadKeys();
  if (!unread.empty()) {
    params.Fail(unread.front(), "unknown parameter (" + stage.plugin->id() + " does not read it)");
  }
  return handle;
}

}  // namespace sift::daemon
