#include "bench_config.h"

#include "tools/common/command_line.h"

#include <set>

#include "sift/error.h"

namespace sift::bench {

BenchConfig ParseConfig(const std::string& text) {
  BenchConfig c;
  std::string rest = text;
  const size_t eq = rest.find('=');
  const size_t brace = rest.find('{');
  if (eq != std::string::npos && (brace == std::string::npos || eq < brace)) {
    c.label = rest.substr(0, eq);
    rest = rest.substr(eq + 1);
  }
  const size_t colon = rest.find(':');
  c.pipeline = rest.substr(0, colon);
  if (colon != std::string::npos) {
    c.overrides = nlohmann::json::parse(rest.substr(colon + 1), nullptr, false);
    if (c.overrides.is_discarded() || !c.overrides.is_object()) {
      throw Error("config '" + text + "': the overrides after ':' must be a JSON object");
    }
  }
  if (c.pipeline.empty()) throw Error("config '" + text + "': no pipeline name");
  if (c.label.empty()) c.label = c.pipeline;
  return c;
}

std::vector<BenchConfig> ParseConfigs(const std::vector<std::string>& configs,
                                      const std::string& pipelines) {
  std::vector<BenchConfig> out;
  for (const std::string& p : cli::SplitList(pipelines)) out.push_back(ParseConfig(p));
  for (const std::string& c : configs) out.push_back(ParseConfig(c));
  if (out.empty()) throw Error("no configs: give --pipelines and/or --config");
  std::set<std::string> labels;
  for (const BenchConfig& c : out) {
    if (!labels.insert(c.label).second) throw Error("duplicate config label '" + c.label + "'");
  }
  return out;
}

}  // namespace sift::bench
