#include "daemon/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "daemon/local_stage_host.h"
#include "daemon/state_codec.h"
#include "sift/cost_report.h"
#include "sift/error.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

// The overrides that apply to one stage: its plugin's entry, then its label's.
json StageOverrides(const ResolvedStage& stage, const json& overrides) {
  json merged = json::object();
  for (const std::string& key : {stage.config.plugin, stage.config.label}) {
    auto it = overrides.find(key);
    if (it != overrides.end() && it->is_object()) merged.update(*it);
  }
  return merged;
}

Status CheckOverrideKeys(const std::string& pipeline, const std::vector<ResolvedStage>& stages,
                         const json& overrides) {
  if (overrides.is_null()) return Status::Ok();
  if (!overrides.is_object()) {
    return Status(StatusCode::kInvalidArgument, "bad_override",
                  "overrides must be an object keyed by stage name");
  }
  for (const auto& [key, value] : overrides.items()) {
    bool found = false;
    std::string names;
    for (const ResolvedStage& s : stages) {
      found = found || key == s.config.label || key == s.config.plugin;
      names += (names.empty() ? "" : ", ") + s.config.label;
    }
    if (!found) {
      return Status(StatusCode::kInvalidArgument, "bad_override",
                    "overrides: pipeline '" + pipeline + "' has no stage or plugin '" + key +
                        "' (stages: " + names + ")");
    }
    if (!value.is_object()) {
      return Status(StatusCode::kInvalidArgument, "bad_override",
                    "overrides: '" + key + "' must be an object of parameters");
    }
  }
  return Status::Ok();
}

// Prefix-cache entries are filed under the plugin generation that made them: a hot reload
// changes the hash.
std::string PrefixScope(const ResolvedStage& stage) {
  return stage.plugin->id() + "#" + stage.plugin->info().content_hash;
}

// The scope a stage's context state (RequestPlan::context_state) is filed under: its generation,
// the variant it named and a digest of the pipeline and of every stage up to it with its
// parameters (the request's overrides included); empty where the stage has no prefix cache (a
// remote stage, or a daemon without one).
std::string ContextStateScope(const ResolvedStage& stage, const LocalExecution& local,
                              const std::string& lineage, const std::string& variant) {
  if (!stage.config.endpoint.empty() || local.prefix_cache == nullptr) return "";
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016zx", std::hash<std::string>{}(lineage));
  return PrefixScope(stage) + "/" + variant + "/" + digest;
}

Status RunLocal(const ResolvedStage& stage, Stage& instance, const Model& model,
                RequestState& state, StageContext& context, const LocalExecution& local) {
  LocalHopJob job;  // its thread_state captures this thread's LibTorch state
  job.stage = &instance;
  job.model = &model;
  job.state = &state;
  job.direct = local.direct ? &context : nullptr;
  job.kind = stage.plugin->kind();
  job.engine = local.engine;
  job.decoder = local.decoder != nullptr ? local.decoder : local.engine;
  job.slice_tokens = local.slice_tokens;
  job.prefix_cache = local.prefix_cache;
  job.prefix_scope = PrefixScope(stage);
  const LocalHopJob* handle = &job;
  std::vector<zmq::message_t> payload;
  payload.emplace_back(&handle, sizeof(handle));
  json header = {{"plugin", stage.plugin->name()},
                 {"version", stage.plugin->version()},
                 {"label", stage.config.label}};
  return CallHop(LocalStageEndpoint(), std::move(header), std::move(payload), context, nullptr)
      .status;
}

Status RunRemote(const ResolvedStage& stage, const json& params, const Model& model,
                 RequestState& state, StageContext& context, const RemoteHops& remote) {
  CurveClientKeys curve = remote.curve;
  if (!stage.config.worker_key.empty()) curve.server_key = stage.config.worker_key;
  if (curve.enabled() && curve.secret_key.empty()) {
    return Status(StatusCode::kFailedPrecondition, "curve_config",
                  stage.config.endpoint +
                      ": a worker key is set but this daemon has no key pair of its own "
                      "(--hop-curve-secret-key)");
  }
  EncodedState encoded;
  try {
    encoded = EncodeState(state);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, "encode_failed", e.what());
  }
  std::vector<zmq::message_t> payload;
  for (const at::Tensor& t : encoded.tensors) payload.push_back(TensorFrame(t));
  json header = {{"plugin", stage.plugin->name()}, {"version", stage.plugin->version()},
                 {"label", stage.config.label},    {"params", params},
                 {"model", ModelSignature(model)}, {"state", std::move(encoded.header)}};
  encoded.tensors.clear();
  HopOutcome out = CallHop(stage.config.endpoint, std::move(header), std::move(payload), context,
                           &remote.timeouts, &curve);
  auto it = out.done.header.find("state");
  if (it != out.done.header.end()) {
    std::vector<FrameView> views;
    for (const zmq::message_t& m : out.done.payload) views.push_back({m.data(), m.size()});
    RequestState reply;
    try {
      DecodeState(*it, views, model.options().device, &reply);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, "bad_worker_reply",
                    stage.config.endpoint + ": " + e.what());
    }
    state.AdoptProducts(std::move(reply));
  }
  return out.status;
}

}  // namespace

json ModelSignature(const Model& model) {
  const ModelConfig& c = model.config();
  return {{"layers", c.num_layers},
          {"heads", c.num_heads},
          {"kv_heads", c.num_kv_heads},
          {"head_dim", c.head_dim},
          {"vocab", c.vocab_size},
          {"hidden", c.hidden_size},
          {"dtype", DtypeName(model.options().dtype)}};
}

Status RunPipeline(const std::string& pipeline, const std::vector<ResolvedStage>& stages,
                   const Model& model, RequestState& state, const json& overrides,
                   StageContext& context, const RemoteHops& remote, const LocalExecution& local) {
  SIFT_RETURN_IF_ERROR(CheckOverrideKeys(pipeline, stages, overrides));
  std::vector<StageHandle> instances;
  std::vector<json> params;
  for (const ResolvedStage& stage : stages) {
    const json stage_overrides = StageOverrides(stage, overrides);
    try {
      instances.push_back(InstantiateStage(stage, stage_overrides, model));
    } catch (const std::exception& e) {
      return Status(StatusCode::kInvalidArgument, "bad_override", e.what());
    }
    json p = stage.config.params.ToJson();
    p.update(stage_overrides);
    params.push_back(std::move(p));
  }
  state.plan.prompt_tokens = static_cast<int64_t>(state.tokens.size());
  state.plan.question_begin = state.question_begin;
  std::string lineage = pipeline;  // what the stages up to i are: plugins, builds, parameters
  for (size_t i = 0; i < stages.size(); ++i) {
    lineage += "\n" + PrefixScope(stages[i]) + " " + params[i].dump();
    const std::string named = state.plan.context_state;
    const Status planned = instances[i]->Plan(model, state.plan);
    if (!planned.ok()) {
      return Status(planned.code(), planned.reason(),
                    "stage '" + stages[i].config.label + "' (plan): " + planned.message());
    }
    if (state.plan.context_state != named && !state.plan.context_state.empty()) {
      state.plan.context_state =
          ContextStateScope(stages[i], local, lineage, state.plan.context_state);
    }
  }
  // A stage on a worker gets a copy of the state: a prefill there cannot call the local select
  // stage, nor a select there be called by the local prefill.
  const bool all_local = std::all_of(stages.begin(), stages.end(), [](const ResolvedStage& s) {
    return s.config.endpoint.empty();
  });
  if (!all_local) {
    state.plan.select_layer = nullptr;
    state.plan.kv_peak_entries = 0;
  }
  if (local.after_plan) SIFT_RETURN_IF_ERROR(local.after_plan(state));
  bool decode_reached = false;
  for (size_t i = 0; i < stages.size(); ++i) {
    const ResolvedStage& stage = stages[i];
    if (context.Cancelled()) return context.CancelStatus();
    if (!decode_reached && stage.plugin->kind() == StageKind::kDecode) {
      decode_reached = true;
      if (local.before_decode) local.before_decode(state);
    }
    const auto start = std::chrono::steady_clock::now();
    const Status status = stage.config.endpoint.empty()
                              ? RunLocal(stage, *instances[i], model, state, context, local)
                              : RunRemote(stage, params[i], model, state, context, remote);
    RecordStageCost(
        state, stage.config.label, stage.plugin->id(), stage.plugin->kind(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (!status.ok()) {
      return Status(
          status.code(), status.reason(),
          "stage '" + stage.config.label + "' (" + stage.plugin->id() + "): " + status.message());
    }
  }
  return Status::Ok();
}

}  // namespace sift::daemon
