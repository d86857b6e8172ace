// Pipeline files: parsing (toml++) and validation against the loaded plugins.
//
// Schema (docs/pipelines.md is the user's reference):
//
//   name = "snapkv"               # optional, default: the file's stem; [A-Za-z0-9_.-]+
//   description = "..."           # optional
//   model = "default"             # optional; the only model a siftd serves is "default"
//
//   [[stage]]                     # one table per stage, in pipeline order
//   name = "prefill"              # optional label, default: the plugin name; unique
//   plugin = "prefill_full"       # required: a loaded plugin's name
//   endpoint = "tcp://host:port"  # optional: run this stage in a `siftd --worker`
//   [stage.params]                # optional: the plugin's parameters (or params = {...})
//   chunk_size = 4096
//
// Unknown keys at any level are errors. Validation then checks, in this order: every plugin
// is known; kinds are in a legal order (a prefill first; a filter right after a prefill and
// right before a prefill; a select after a prefill, select or reuse; a reuse right after a
// select; exactly one decode, last); each stage constructs with its parameters (so the plugin
// checks types and ranges) and reads every key it was given.
//
// Every error names the place: "pipelines/x.toml:12: stage 'select': unknown plugin 'snapk'
// (known: ...)"; parameter errors come from StageParams with the key's own line.
//
// Per-model defaults (model_defaults.h): parsing also reads <folder of the file>/models/*.toml;
// validation with a model fills each stage's unset keys from the file matching that model.
//
// THREADING: pure functions. ERRORS: throw sift::Error.
#ifndef SIFT_DAEMON_PIPELINE_CONFIG_H_
#define SIFT_DAEMON_PIPELINE_CONFIG_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/model_defaults.h"
#include "daemon/plugin_loader.h"
#include "sift/stage_params.h"

namespace sift::daemon {

struct StageConfig {
  std::string label;     // `name`, default the plugin name
  std::string plugin;    // plugin name
  std::string endpoint;  // "" = in process
  std::string where;     // "file:line" of the stage's [[stage]] header
  StageParams params;    // each value with its "file:line" origin; never read (a template)
};

struct PipelineConfig {
  std::string file;  // as given to the parser; prefixes every error
  std::string name;
  std::string description;
  std::string model = "default";
  std::vector<StageConfig> stages;
  std::vector<ModelDefaults> model_defaults;  // every file in <folder of `file`>/models
};

PipelineConfig ParsePipelineFile(const std::string& path);
// Same, from text; `path` is used for names and messages only.
PipelineConfig ParsePipelineText(const std::string& text, const std::string& path);

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
