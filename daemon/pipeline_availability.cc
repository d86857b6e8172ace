#include "daemon/pipeline_availability.h"

#include <filesystem>

namespace sift::daemon {
namespace {

namespace fs = std::filesystem;

// The proxy file of an SPTS stage (prefill_skip_stage.h ResolveProxyPath).
std::string ProxyPath(const std::string& value, const std::string& model_path) {
  const fs::path model(model_path);
  if (value.empty()) {
    fs::path p = model;
    if (p.extension() == ".gguf") p.replace_extension("");
    return p.string() + ".spts.bin";
  }
  const fs::path p(value);
  return p.is_absolute() ? p.string() : (model.parent_path() / p).string();
}

}  // namespace

std::string PipelineUnavailable(const std::vector<ResolvedStage>& stages,
                                const std::string& model_path) {
  for (const ResolvedStage& s : stages) {
    if (s.config.plugin != "prefill_skip" || !s.config.endpoint.empty()) continue;
    StageParams params = s.config.params;  // a copy: reading marks keys as read
    if (!params.GetBool("ltp", true)) continue;
    const std::string proxy = ProxyPath(params.GetString("proxy", ""), model_path);
    std::error_code ec;
    if (fs::exists(proxy, ec)) continue;
    return "stage '" + s.config.label + "' needs the SPTS proxies calibrated for this model, " +
           proxy + ", which do not exist; make them with: build/bin/sift-spts-calibrate --model " +
           model_path + " --text docs --out " + proxy +
           " (tools/setup.sh calibrate does it for the models it fetches)";
  }
  return "";
}

}  // namespace sift::daemon
