#include "bench_config.h"

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

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = text.find(',', from);
    const std::string item =
        text.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return out;
}

std::vector<int64_t> ParseIntList(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& item : SplitList(text)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw Error(what + ": '" + item + "' is not an integer");
    out.push_back(v);
  }
  return out;
}

std::vector<BenchConfig> ParseConfigs(const std::vector<std::string>& configs,
                                      const std::string& pipelines) {
  std::vector<BenchConfig> out;
  for (const std::string& p : SplitList(pipelines)) out.push_back(ParseConfig(p));
  for (const std::string& c : configs) out.push_back(ParseConfig(c));
  if (out.empty()) throw Error("no configs: give --pipelines and/or --config");
  std::set<std::string> labels;
  for (const BenchConfig& c : out) {
    if (!labels.insert(c.label).second) throw Error("duplicate config label '" + c.label + "'");
  }
  return out;
}

}  // namespace sift::bench
