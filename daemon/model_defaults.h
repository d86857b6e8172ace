// Per-model stage parameters: one TOML file per model in the `models/` folder next to the
// pipeline files (pipelines/models/*.toml), so that one pipeline file serves every model while
// the layer-dependent parameters (GemFilter's layer, ILRe's retrieval_layer, the SPTS schedule)
// come from that model's layer scans. docs/pipelines.md "Per-model defaults" is the user's
// reference.
//
//   description = "..."              # optional
//   evidence = "docs/results/..."    # optional: where the values come from
//   [match]                          # which models the file is for; every key given must match
//   architecture = "qwen2"           # required: general.architecture / config.json model_type
//   num_layers = 24                  # optional
//   hidden_size = 896                # optional
//   name = "Qwen2.5 Coder 0.5B"      # optional: case-insensitive substring of the model's name
//   [gemfilter]                      # a plugin name: parameters every stage of that plugin
//   layer = 12                       # starts from (the pipeline file and requests still win)
//
// Precedence for a stage's parameter: request override > the pipeline file's [stage.params] >
// the matching model file's [<plugin>] table > the plugin's built-in default.
//
// THREADING: pure functions. ERRORS: throw sift::Error naming the file and line.
#ifndef SIFT_DAEMON_MODEL_DEFAULTS_H_
#define SIFT_DAEMON_MODEL_DEFAULTS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sift/model_config.h"
#include "sift/stage_params.h"

namespace sift::daemon {

struct ModelDefaults {
  std::string file;
  std::string description;
  std::string evidence;
  std::string architecture;  // [match]
  int64_t num_layers = 0;    // 0 = any
  int64_t hidden_size = 0;   // 0 = any
  std::string name;          // "" = any
  struct Value {
    nlohmann::json value;
    std::string origin;  // "file:line"
  };
  std::map<std::string, std::map<std::string, Value>> plugins;  // plugin -> key -> value

  bool Matches(const ModelConfig& config) const;
};

// Every *.toml in `dir`, sorted by path; an absent folder gives none. Throws on a bad file.
std::vector<ModelDefaults> LoadModelDefaults(const std::string& dir);

// The one file matching `config`, or nullptr. Throws if several match (naming them).
const ModelDefaults* MatchModelDefaults(const std::vector<ModelDefaults>& all,
                                        const ModelConfig& config);

// Sets in `params` every key of `defaults`' table for `plugin` that `params` does not have.
void ApplyModelDefaults(const ModelDefaults& defaults, const std::string& plugin,
                        StageParams* params);

// For tools that construct stages themselves (sift-layer-scan cost, sift-spts-bench): applies to
// `params` (for the plugin params->plugin()) what <pipelines_dir>/models has for `config`;
// nothing when no file matches.
void ApplyModelDefaultsFromDir(const std::string& pipelines_dir, const ModelConfig& config,
                               StageParams* params);

// The folder a pipeline file's model defaults live in: <folder of the file>/models.
std::string ModelDefaultsDir(const std::string& pipeline_file);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_MODEL_DEFAULTS_H_
