// Pipelines: validation of a parsed pipeline file (pipeline_file.h) against the loaded plugins.
//
// Validation checks, in this order: every plugin is known; kinds are in a legal order (a prefill
// first; a filter right after a prefill and right before a prefill; a select after a prefill,
// select or reuse; a reuse right after a select; exactly one decode, last); each stage
// constructs with its parameters (so the plugin checks types and ranges) and reads every key
// it was given.
//
// Every error names the place: "pipelines/x.toml:12: stage 'select': unknown plugin 'snapk'
// (known: ...)"; parameter errors come from StageParams with the key's own line.
//
// Per-model defaults (model_defaults.h): validation with a model reads <folder of the file>/
// models/*.toml and fills each stage's unset keys from the file matching that model.
//
// THREADING: pure functions. ERRORS: throw sift::Error.
#ifndef SIFT_DAEMON_PIPELINE_CONFIG_H_
#define SIFT_DAEMON_PIPELINE_CONFIG_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/pipeline_file.h"
#include "daemon/plugin_loader.h"
#include "sift/stage_params.h"

namespace sift::daemon {

struct ResolvedStage {
  StageConfig config;
  std::shared_ptr<const Plugin> plugin;
};

using PluginMap = std::map<std::string, std::shared_ptr<const Plugin>>;

// Checks plugins, kind order and (when `model` is not null) parameters; returns the stages
// bound to their plugins, with the model's defaults applied when `model` is not null.
std::vector<ResolvedStage> ValidatePipeline(const PipelineConfig& config, const PluginMap& plugins,
                                            const Model* model);

// Builds a stage instance from the stage's parameters overlaid with `overrides` (a JSON object,
// origin "request"), rejecting keys nobody read. Throws sift::Error naming the key.
StageHandle InstantiateStage(const ResolvedStage& stage, const nlohmann::json& overrides,
                             const Model& model);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PIPELINE_CONFIG_H_
