// libFuzzer target: the pipeline TOML loader (daemon/pipeline_file.h) and the StageParams
// getters a plugin would call on what it loaded, including per-request caps.
//
// Input: a pipeline file's text. Expected: a PipelineConfig or a sift::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/pipeline_file.h"
#include "sift/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  sift::daemon::PipelineConfig config;
  try {
    config = sift::daemon::ParsePipelineText(text, "fuzz.toml");
  } catch (const sift::Error&) {
    return 0;
  }
  for (sift::daemon::StageConfig& stage : config.stages) {
    const nlohmann::json values = stage.params.ToJson();
    for (const auto& [key, value] : values.items()) {
      const sift::StageParams& p = stage.params;
      try {
        (void)p.GetInt(key, 0, -100, 100, sift::RequestCap{1, 10, true});
      } catch (const sift::Error&) {
      }
      try {
        (void)p.GetDouble(key, 0.5, 0, 1);
      } catch (const sift::Error&) {
      }
      try {
        (void)p.GetBool(key, false);
      } catch (const sift::Error&) {
      }
      try {
        (void)p.GetString(key, "", {"a", "b"});
      } catch (const sift::Error&) {
      }
      try {
        (void)p.GetIntList(key, {}, 0, 1 << 20);
      } catch (const sift::Error&) {
      }
      (void)value;
    }
    stage.params.Set("chunk_size", 1, sift::StageParams::kRequestOrigin);
    try {
      (void)stage.params.GetInt("chunk_size", 0, 0, INT64_MAX,
                                sift::RequestCap{64, INT64_MAX, true});
      __builtin_trap();  // a request's 1 is outside the cap
    } catch (const sift::Error&) {
    }
    (void)stage.params.UnreadKeys();
  }
  return 0;
}
