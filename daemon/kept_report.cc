#include "daemon/kept_report.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sift::daemon {
namespace {

using json = nlohmann::json;

// One head's positions (in the cache's order) as sorted half-open ranges [begin, end).
json Ranges(const int64_t* positions, int64_t count) {
  std::vector<int64_t> sorted(positions, positions + count);
  std::sort(sorted.begin(), sorted.end());
  json out = json::array();
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] <= sorted[j - 1] + 1) ++j;
    out.push_back({sorted[i], sorted[j - 1] + 1});
    i = j;
  }
  return out;
}

}  // namespace

json KeptReport(const RequestState& state, const Model& model) {
  json report = {{"prompt_tokens", state.prompt_length},
                 {"tokens", static_cast<int64_t>(state.tokens.size())},
                 {"layers", json::array()}};
  bool filtered = false;
  for (const StageCost& s : state.stats.stages) filtered = filtered || s.kind == StageKind::kFilter;
  if (filtered && model.has_tokenizer()) {
    report["filtered_prompt"] = model.tokenizer().Decode(state.tokens);
  }
  if (!state.cache) return report;
  json groups = json::array();
  for (int64_t layer = 0; layer < state.cache->num_layers(); ++layer) {
    const at::Tensor positions = state.cache->Positions(layer).contiguous();  // [Hkv, size]
    const int64_t* data = positions.data_ptr<int64_t>();  // host: positions are host metadata
    json heads = json::array();
    for (int64_t h = 0; h < positions.size(0); ++h) {
      heads.push_back(Ranges(data + h * positions.size(1), positions.size(1)));
    }
    if (!groups.empty() && groups.back()["heads"] == heads) {
      groups.back()["last"] = layer;
    } else {
      groups.push_back({{"first", layer}, {"last", layer}, {"heads", std::move(heads)}});
    }
  }
  report["layers"] = std::move(groups);
  return report;
}

}  // namespace sift::daemon
