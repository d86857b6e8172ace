#include "in_process_backend.h"

#include <chrono>
#include <map>

#include "daemon/catalog.h"
#include "daemon/pipeline_config.h"
#include "daemon/pipeline_runner.h"
#include "daemon/protocol.h"
#include "daemon/request_builder.h"
#include "sift/cost_report.h"
#include "sift/device.h"
#include "sift/error.h"
#include "sift/op_counter.h"

namespace sift::bench {
namespace {

using daemon::ResolvedStage;
using nlohmann::json;

class QuietContext final : public StageContext {
 public:
  bool Cancelled() const override { return false; }
  Status CancelStatus() const override { return Status::Ok(); }
  void Progress(const std::string&, int64_t, int64_t) override {}
  bool Emit(const std::string&, TokenId) override { return true; }
};

// The overrides of one stage as RunPipeline merges them: plugin entry, then label entry.
json StageOverrides(const ResolvedStage& stage, const json& overrides) {
  json merged = json::object();
  for (const std::string& key : {stage.config.plugin, stage.config.label}) {
    auto it = overrides.find(key);
    if (it != overrides.end() && it->is_object()) merged.update(*it);
  }
  return merged;
}

// Only the override entries that name one of `stages` (RunPipeline rejects the others).
json OverridesFor(const std::vector<ResolvedStage>& stages, const json& overrides) {
  json out = json::object();
  for (const auto& [key, value] : overrides.items()) {
    for (const ResolvedStage& s : stages) {
      if (key == s.config.label || key == s.config.plugin) out[key] = value;
    }
  }
  return out;
}

bool MergeRequest(AttentionStatsRequest& into, const AttentionStatsRequest& r) {
  if (into.window != r.window && into.window != 0 && r.window != 0) return false;
  if (into.max_from_query != r.max_from_query && into.max_from_query >= 0 &&
      r.max_from_query >= 0) {
    return false;
  }
  into.window = std::max(into.window, r.window);
  into.max_from_query = std::max(into.max_from_query, r.max_from_query);
  into.last_query = into.last_query || r.last_query;
  into.column_sum = into.column_sum || r.column_sum;
  into.last_query_logit_sum = into.last_query_logit_sum || r.last_query_logit_sum;
  return true;
}

// The prefill reads only plan.stats; reuse_leader is read by the select and reuse stages, which run
// with their own config's plan. So the group plan is the union of the statistics requests, and
// a reuse config (whose followers ask for none) shares the prefill of configs that ask for more.
bool MergePlan(RequestPlan& into, const RequestPlan& plan) {
  RequestPlan merged = into;
  merged.reuse_leader.clear();
  for (const auto& [layer, request] : plan.stats) {
    auto it = merged.stats.find(layer);
    if (it == merged.stats.end()) {
      merged.stats[layer] = request;
    } else if (!MergeRequest(it->second, request)) {
      return false;
    }
  }
  into = std::move(merged);
  return true;
}

struct Prepared {
  const BenchConfig* config = nullptr;
  size_t index = 0;  // in the caller's configs
  std::string pipeline;
  std::vector<ResolvedStage> stages;
  RequestPlan plan;
  std::string prefill_key;  // "" = cannot share
};

class InProcessBackend final : public Backend {
 public:
  explicit InProcessBackend(const InProcessOptions& options) : options_(options) {
    ModelOptions mo;
    mo.dtype = ParseDtype(options.dtype);
    mo.device = ParseDevice(options.device);
    mo.threads = options.threads;
    mo.cpu_kernels = options.cpu_kernels;
    ConfigureThreads(options.threads);
    model_ = Model::Load(options.model, mo);
    daemon::CatalogOptions co;
    co.plugins_dir = options.plugins_dir;
    co.pipelines_dir = options.pipelines_dir;
    co.poll_interval_ms = 0;
    co.log = [](const std::string& level, const json& fields) {
      if (level != "info") {
        std::fprintf(stderr, "sift-bench: catalog %s: %s\n", level.c_str(),
                     fields.value("message", fields.dump()).c_str());
      }
    };
    catalog_ = daemon::Catalog::Create(co, model_);
    snapshot_ = catalog_->Snapshot();
  }

  std::string Describe() const override { return "in-process"; }

  std::vector<RunResult> Run(const std::vector<BenchConfig>& configs, const Sample& sample,
                             const RunOptions& options) override {
    std::vector<RunResult> results(configs.size());
    RequestState base;
    const Status built = BuildBase(sample, options, &base);
    if (!built.ok()) {
      for (RunResult& r : results) r.error = built.ToString();
      return results;
    }
    std::vector<Prepared> prepared = PrepareAll(configs, &results);
    for (Group& g : GroupByPrefill(prepared)) {
      if (g.members.size() == 1) {
        results[g.members[0]->index] = RunAlone(*g.members[0], base);
      } else {
        RunGroup(g, base, &results);
      }
    }
    return results;
  }

 private:
  // Configs that share one prefill: the same prefill key and mergeable plans.
  struct Group {
    std::vector<Prepared*> members;
    RequestPlan plan;  // the members' statistics requests merged (MergePlan)
  };

  // Resolves and plans every config; a config that fails gets its error in `results`.
  std::vector<Prepared> PrepareAll(const std::vector<BenchConfig>& configs,
                                   std::vector<RunResult>* results) {
    std::vector<Prepared> prepared;
    for (size_t i = 0; i < configs.size(); ++i) {
      Prepared p;
      p.config = &configs[i];
      p.index = i;
      try {
        Resolve(configs[i], &p);
      } catch (const std::exception& e) {
        (*results)[i].error = e.what();
        continue;
      }
      prepared.push_back(std::move(p));
    }
    return prepared;
  }

  std::vector<Group> GroupByPrefill(std::vector<Prepared>& prepared) const {
    std::vector<Group> groups;
    for (Prepared& p : prepared) {
      bool placed = false;
      if (options_.share_prefill && !options_.count_ops && !p.prefill_key.empty()) {
        for (Group& g : groups) {
          if (g.members[0]->prefill_key != p.prefill_key) continue;
          if (MergePlan(g.plan, p.plan)) {
            g.members.push_back(&p);
            placed = true;
            break;
          }
        }
      }
      if (!placed) groups.push_back(Group{{&p}, p.plan});
    }
    return groups;
  }

  RunResult RunAlone(const Prepared& p, const RequestState& base) {
    RequestState state = base.Clone();
    const auto start = std::chrono::steady_clock::now();
    if (options_.count_ops) return RunCounted(p, std::move(state), start);
    const Status s =
        daemon::RunPipeline(p.pipeline, p.stages, *model_, state, p.config->overrides, context_);
    return Finish(state, s, start, false);
  }

  // RunAlone with the operators of the stages before the decode stage and of the decode stage
  // counted apart (the stages run on the hop executor, which adopts this thread's counter).
  RunResult RunCounted(const Prepared& p, RequestState state,
                       std::chrono::steady_clock::time_point start) {
    size_t split = p.stages.size();
    if (split > 0 && p.stages.back().plugin->kind() == StageKind::kDecode) --split;
    const std::vector<ResolvedStage> head(p.stages.begin(), p.stages.begin() + split);
    const std::vector<ResolvedStage> tail(p.stages.begin() + split, p.stages.end());
    json counts = {{"layers", model_->config().num_layers}};
    Status s = Status::Ok();
    for (const auto& [part, stages] : {std::pair{"prefill", &head}, std::pair{"decode", &tail}}) {
      if (!s.ok() || stages->empty()) continue;
      OpCounter counter;
      s = daemon::RunPipeline(p.pipeline, *stages, *model_, state,
                              OverridesFor(*stages, p.config->overrides), context_);
      counts[std::string(part) + "_ops"] = counter.ops();
      counts[std::string(part) + "_host_reads"] = counter.host_reads();
    }
    RunResult r = Finish(state, s, start, false);
    r.stats.update(counts);
    return r;
  }

  // One prefill (the first stage, with the group's merged plan), then the rest of each member's
  // pipeline on its own copy of the prefilled state; each member's client time includes the
  // shared prefill.
  void RunGroup(const Group& g, const RequestState& base, std::vector<RunResult>* results) {
    const Prepared& lead = *g.members[0];
    RequestState shared = base.Clone();
    shared.plan = g.plan;
    const std::vector<ResolvedStage> first(lead.stages.begin(), lead.stages.begin() + 1);
    const auto start = std::chrono::steady_clock::now();
    const Status ps = daemon::RunPipeline(lead.pipeline, first, *model_, shared,
                                          OverridesFor(first, lead.config->overrides), context_);
    const double prefill_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (const Prepared* p : g.members) {
      if (!ps.ok()) {
        (*results)[p->index].error = ps.ToString();
        continue;
      }
      RequestState state = shared.Clone();
      state.plan = p->plan;
      const std::vector<ResolvedStage> rest(p->stages.begin() + 1, p->stages.end());
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = daemon::RunPipeline(p->pipeline, rest, *model_, state,
                                           OverridesFor(rest, p->config->overrides), context_);
      (*results)[p->index] = Finish(state, s, t0, true);
      (*results)[p->index].client_ms += prefill_ms;
    }
  }

  Status BuildBase(const Sample& sample, const RunOptions& options, RequestState* state) {
    daemon::GenerateRequest req;
    req.id = sample.id;
    req.input = daemon::InputKind::kContextQuestion;
    req.context = sample.context;
    req.question = sample.question;
    req.max_tokens = options.max_tokens > 0 ? options.max_tokens : sample.max_tokens;
    req.ignore_eos = options.ignore_eos;
    bool clamped = false;
    json details;
    return daemon::BuildRequestState(*model_, req, daemon::BuildOptions{}, state, &clamped,
                                     &details);
  }

  void Resolve(const BenchConfig& config, Prepared* p) {
    auto pipeline = snapshot_->FindPipeline(config.pipeline);
    if (!pipeline) throw Error("unknown or broken pipeline '" + config.pipeline + "'");
    auto it = resolved_.find(config.pipeline);
    if (it == resolved_.end()) {
      const daemon::PipelineConfig pc = daemon::ParsePipelineFile(pipeline->file());
      daemon::PluginMap plugins;
      for (const daemon::StageConfig& s : pc.stages) {
        auto plugin = snapshot_->FindPlugin(s.plugin);
        if (plugin) plugins[s.plugin] = plugin;
      }
      it = resolved_.emplace(config.pipeline, daemon::ValidatePipeline(pc, plugins, model_.get()))
               .first;
    }
    p->pipeline = config.pipeline;
    p->stages = it->second;
    for (const ResolvedStage& stage : p->stages) {
      daemon::StageHandle instance =
          daemon::InstantiateStage(stage, StageOverrides(stage, config.overrides), *model_);
      const Status s = instance->Plan(*model_, p->plan);
      if (!s.ok()) throw Error("stage '" + stage.config.label + "' (plan): " + s.message());
    }
    // The plan outlives these instances and one prefill may serve several configurations: no
    // selection inside the prefill (it is offered only for a known prompt_tokens, unset here).
    p->plan.select_layer = nullptr;
    p->plan.kv_peak_entries = 0;
    if (p->stages.size() >= 2 && p->stages[0].plugin->kind() == StageKind::kPrefill &&
        p->stages[0].config.endpoint.empty()) {
      json params = p->stages[0].config.params.ToJson();
      params.update(StageOverrides(p->stages[0], config.overrides));
      p->prefill_key = p->stages[0].plugin->id() + " " + params.dump();
    }
  }

  RunResult Finish(const RequestState& state, const Status& status,
                   std::chrono::steady_clock::time_point start, bool shared) {
    RunResult r;
    r.shared_prefill = shared;
    r.client_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok()) {
      r.error = status.ToString();
      return r;
    }
    r.ok = true;
    r.text = state.result.text;
    r.finish_reason = FinishReasonName(state.result.finish);
    r.prompt_tokens = state.prompt_length;
    r.completion_tokens = static_cast<int64_t>(state.result.tokens.size());
    const CostReport cost = MakeCostReport(state, *model_);
    json stages = json::array();
    for (const StageCost& s : cost.stages) {
      stages.push_back({{"stage", s.stage}, {"plugin", s.plugin}, {"ms", s.ms}});
    }
    r.stats = {{"prefill_ms", cost.prefill_ms},
               {"decode_ms", cost.decode_ms},
               {"tokens_before", cost.tokens_before},
               {"tokens_kept", cost.tokens_kept},
               {"kv_bytes", cost.kv_bytes},
               {"kv_bytes_full", cost.kv_bytes_full},
               {"stages", stages}};
    return r;
  }

  InProcessOptions options_;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<daemon::Catalog> catalog_;
  std::shared_ptr<const daemon::CatalogSnapshot> snapshot_;
  std::map<std::string, std::vector<ResolvedStage>> resolved_;
  QuietContext context_;
};

}  // namespace

std::unique_ptr<Backend> MakeInProcessBackend(const InProcessOptions& options) {
  return std::make_unique<InProcessBackend>(options);
}

}  // namespace sift::bench
