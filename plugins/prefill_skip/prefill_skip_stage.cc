#include "prefill_skip_stage.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "prefill/prompt_check.h"
#include "selection/selection_ops.h"
#include "sift/error.h"
#include "spts_prefill.h"
#include "spts_proxy.h"

namespace sift::plugins {
namespace {

// The built-in schedule for a model without settings of its own (pipelines/models/*.toml sets
// them per model): the paper's LLaMA-3.1-8B schedule, dense layers 0-9 and stage ends
// 13/18/23/28 of 32, scaled to `layers` (30 layers give SmolLM2's 9 and 12/17/22/26) and kept
// strictly increasing below `layers`, so that every model gets a schedule that validates.
struct ScaledSchedule {
  int64_t skip_start;
  std::vector<int64_t> stage_ends;
};
ScaledSchedule PaperScheduleFor(int64_t layers) {
  const auto scale = [&](double paper_layer) {
    return static_cast<int64_t>(std::lround(paper_layer * static_cast<double>(layers) / 32.0));
  };
  ScaledSchedule s{std::clamp<int64_t>(scale(10), 0, std::max<int64_t>(layers - 1, 0)), {}};
  int64_t prev = s.skip_start - 1;
  for (double end : {13.0, 18.0, 23.0, 28.0}) {
    const int64_t e = std::max(scale(end), prev + 1);
    if (e >= layers) break;
    s.stage_ends.push_back(e);
    prev = e;
  }
  return s;
}

}  // namespace

std::string PrefillSkipStage::ResolveProxyPath(const std::string& value, const Model& model) {
  namespace fs = std::filesystem;
  const fs::path model_path(model.path());
  if (value.empty()) {
    fs::path p = model_path;
    if (p.extension() == ".gguf") p.replace_extension("");
    return p.string() + ".spts.bin";
  }
  const fs::path p(value);
  if (p.is_absolute()) return p.string();
  return (model_path.parent_path() / p).string();
}

PrefillSkipStage::PrefillSkipStage(const StageParams& params, const Model& model)
    : proxy_path_(ResolveProxyPath(params.GetString("proxy", ""), model)),
      ltp_(params.GetBool("ltp", true)),
      proportional_(params.GetString("budget_mode", "fixed", {"fixed", "proportional"}) ==
                    "proportional"),
      reference_length_(params.GetInt("reference_length", 8192, 1, 1 << 24)),
      budgets_(params.GetIntList("budgets", {2304, 1792, 1024, 512}, 1, 1 << 24)),
      prune_margin_(params.GetInt("prune_margin", 256, 0, 1 << 24)),
      block_size_(params.GetInt("block_size", 256, 1, 65536, RequestCap{64, 65536})) {
  const int64_t layers = model.config().num_layers;
  const ScaledSchedule paper = PaperScheduleFor(layers);
  settings_.skip_start = params.GetInt("skip_start", paper.skip_start, 0, layers);
  settings_.stage_ends = params.GetIntList("stage_ends", paper.stage_ends, 0, layers - 1);
  // Fewer layers than the paper's schedule needs: the default budgets' first stages.
  if (!params.Has("budgets") && budgets_.size() > settings_.stage_ends.size()) {
    budgets_.resize(settings_.stage_ends.size());
  }
  settings_.msdp = params.GetBool("msdp", true);
  settings_.floor = params.GetInt("floor", kDefaultFloor, 0, kMaxFloor);
  settings_.fractions = false;
  settings_.budgets.assign(budgets_.begin(), budgets_.end());
  settings_.prune_margin = static_cast<double>(prune_margin_);
  if (proportional_) {
    for (int64_t b : budgets_) {
      if (b > reference_length_)
        params.Fail("budgets", "a proportional budget exceeds reference_length");
    }
    if (prune_margin_ >= reference_length_) {
      params.Fail("prune_margin", "must be below reference_length");
    }
  }
  try {
    SptsSchedule::Validate(settings_, layers);
  } catch (const Error& e) {
    params.Fail(params.Has("budgets") ? "budgets" : "stage_ends", e.what());
  }
  if (ltp_ && params.Has("proxy")) {
    try {
      SptsProxy::LoadShared(proxy_path_)->CheckModel(model.config(), proxy_path_);
    } catch (const Error& e) {
      params.Fail("proxy", e.what());
    }
  }
}

Status PrefillSkipStage::Run(const Model& model, RequestState& state, StageContext& context) {
  const ModelConfig& config = model.config();
  SIFT_RETURN_IF_ERROR(CheckPrompt(model, state.tokens));
  if (!state.plan.stats.empty()) {
    return Status(StatusCode::kFailedPrecondition, "stats_unsupported",
                  "prefill_skip does not collect attention statistics for later stages");
  }
  std::shared_ptr<const SptsProxy> proxy;
  if (ltp_) {
    try {
      proxy = SptsProxy::LoadShared(proxy_path_, model.options().device);
      proxy->CheckModel(config, proxy_path_);
    } catch (const Error& e) {
      return Status(StatusCode::kFailedPrecondition, "spts_proxy", e.what());
    }
  }

  SptsPrefillOptions options;
  options.settings = settings_;
  if (proportional_) {
    options.settings.fractions = true;
    for (size_t s = 0; s < budgets_.size(); ++s) {
      options.settings.budgets[s] =
          static_cast<double>(budgets_[s]) / static_cast<double>(reference_length_);
    }
    options.settings.prune_margin =
        static_cast<double>(prune_margin_) / static_cast<double>(reference_length_);
  }
  options.proxy = proxy.get();
  options.attention.block_size = block_size_;
  options.cancelled = [&](int64_t layer, int64_t layers) {
    if (context.Cancelled()) return true;
    context.Progress("prefill", layer, layers);
    context.Yield();  // other requests' decode steps may run between layers
    return false;
  };
  auto cache = std::make_unique<KvCache>(model.NewCache());
  at::Tensor logits;
  if (!SptsPrefill(model, state.tokens, options, *cache, &logits)) return context.CancelStatus();
  const int64_t layers = config.num_layers;
  context.Progress("prefill", layers, layers);

  state.AdoptPrefill(std::move(cache), std::move(logits), {});
  return Status::Ok();
}

}  // namespace sift::plugins
