// Pipeline files: parsing (toml++) into a PipelineConfig, checking the schema. No LibTorch and
// no plugins: validation against the loaded plugins is pipeline_config.h.
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
//   worker_key = "Z85..."         # optional, with endpoint: the worker's CURVE public key
//   [stage.params]                # optional: the plugin's parameters (or params = {...})
//   chunk_size = 4096
//
// Unknown keys at any level are errors. Every error names the place: "pipelines/x.toml:12:
// stage 2: missing key 'plugin'".
//
// THREADING: pure functions. ERRORS: throw sift::Error.
#ifndef SIFT_DAEMON_PIPELINE_FILE_H_
#define SIFT_DAEMON_PIPELINE_FILE_H_

#include <string>
#include <vector>

#include "sift/stage_params.h"

namespace sift::daemon {

struct StageConfig {
  std::string label;       // `name`, default the plugin name
  std::string plugin;      // plugin name
  std::string endpoint;    // "" = in process
  std::string worker_key;  // the worker's CURVE public key (Z85); "" = the daemon's default
  std::string where;       // "file:line" of the stage's [[stage]] header
  StageParams params;      // each value with its "file:line" origin; never read (a template)
};

struct PipelineConfig {
  std::string file;  // as given to the parser; prefixes every error
  std::string name;
  std::string description;
  std::string model = "default";
  std::vector<StageConfig> stages;
};

PipelineConfig ParsePipelineFile(const std::string& path);
// Same, from text; `path` is used for names and messages only.
PipelineConfig ParsePipelineText(const std::string& text, const std::string& path);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_PIPELINE_FILE_H_
