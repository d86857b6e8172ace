#include "daemon/state_codec.h"

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "sift/error.h"
#include "sift/host.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {at::kFloat, "f32"}, {at::kBFloat16, "bf16"}, {at::kHalf, "f16"},  {at::kDouble, "f64"},
    {at::kLong, "i64"},  {at::kInt, "i32"},       {at::kShort, "i16"}, {at::kChar, "i8"},
    {at::kByte, "u8"},   {at::kBool, "bool"},
};

// ---- encoding ----

class Encoder {
 public:
  // Descriptor of `t` (null when undefined); its bytes become the next frame.
  json Tensor(const at::Tensor& t) {
    if (!t.defined()) return nullptr;
    at::Tensor c = ToHost(t);
    json d = {{"frame", tensors_.size()},
              {"dtype", WireDtypeName(c.scalar_type())},
              {"shape", c.sizes().vec()}};
    tensors_.push_back(std::move(c));
    return d;
  }
  json Bytes(const std::string& s) {
    at::Tensor t = at::empty({static_cast<int64_t>(s.size())},
                             at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());  // host: t is new, on the CPU
    return Tensor(t);
  }
  std::vector<at::Tensor> Take() { return std::move(tensors_); }

 private:
  std::vector<at::Tensor> tensors_;
};

json EncodeRequest(const AttentionStatsRequest& r) {
  return {{"window", r.window},
          {"last_query", r.last_query},
          {"column_sum", r.column_sum},
          {"max_from_query", r.max_from_query},
          {"last_query_logit_sum", r.last_query_logit_sum}};
}

json EncodeCache(const KvCache* cache, Encoder& enc) {
  if (cache == nullptr) return nullptr;
  const KvCacheShape& shape = cache->shape();
  json layers = json::array();
  for (int64_t l = 0; l < cache->num_layers(); ++l) {
    layers.push_back({{"k", enc.Tensor(cache->Keys(l))},
                      {"v", enc.Tensor(cache->Values(l))},
                      {"positions", enc.Tensor(cache->Positions(l))}});
  }
  return {{"num_layers", shape.num_layers},
          {"num_kv_heads", shape.num_kv_heads},
          {"head_dim", shape.head_dim},
          {"dtype", WireDtypeName(shape.dtype)},
          {"layers", std::move(layers)}};
}

// ---- decoding ----

// Typed access to header fields with errors that name the field path.
const json& Field(const json& obj, const char* key, const std::string& path) {
  SIFT_CHECK(obj.is_object(), "state header: '", path, "' is not an object");
  auto it = obj.find(key);
  SIFT_CHECK(it != obj.end(), "state header: missing '", path, ".", key, "'");
  return *it;
}

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// Whether `v` holds a value of type T exactly: nlohmann's get<T>() would also convert a float
// to an integer, which is undefined behaviour out of range (found by fuzz_state_codec).
template <typename T>
bool Holds(const json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    }
    if (!v.is_number_integer()) return false;
    const int64_t x = v.get<int64_t>();
    return x >= 0 ? static_cast<uint64_t>(x) <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                  : std::is_signed_v<T> && x >= static_cast<int64_t>(std::numeric_limits<T>::min());
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else {
    static_assert(IsVector<T>::value, "Get<T>: unsupported type");
    if (!v.is_array()) return false;
    for (const json& e : v) {
      if (!Holds<typename T::value_type>(e)) return false;
    }
    return true;
  }
}

template <typename T>
T Get(const json& obj, const char* key, const std::string& path) {
  const json& v = Field(obj, key, path);
  SIFT_CHECK(Holds<T>(v), "state header: '", path, ".", key, "' has the wrong type or range: ",
             v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 80));
  return v.get<T>();
}

class Decoder {
 public:
  Decoder(const std::vector<FrameView>& frames, const at::Device& device)
      : frames_(frames), device_(device) {}

  at::Tensor Tensor(const json& d, const std::string& path) {
    if (d.is_null()) return at::Tensor();
    const int64_t frame = Get<int64_t>(d, "frame", path);
    SIFT_CHECK(frame >= 0 && frame < static_cast<int64_t>(frames_.size()), "state header: '", path,
               "' refers to frame ", frame, " of ", frames_.size());
    const at::ScalarType dtype = ParseWireDtype(Get<std::string>(d, "dtype", path));
    const std::vector<int64_t> shape = Get<std::vector<int64_t>>(d, "shape", path);
    // Sizes from a peer: every product is checked, and must match the frame it describes.
    int64_t numel = 1;
    for (int64_t s : shape) {
      SIFT_CHECK(s >= 0, "state header: '", path, "' has a negative dimension");
      SIFT_CHECK(!__builtin_mul_overflow(numel, s, &numel), "state header: '", path,
                 "' has too many elements");
    }
    const FrameView& f = frames_[frame];
    size_t expected = 0;
    SIFT_CHECK(
        !__builtin_mul_overflow(static_cast<size_t>(numel), c10::elementSize(dtype), &expected),
        "state header: '", path, "' has too many elements");
    SIFT_CHECK(f.size == expected, "state: '", path, "' (", WireDtypeName(dtype), " ",
               json(shape).dump(), ") needs ", expected, " bytes, frame ", frame, " has ", f.size);
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kCPU));
    if (expected > 0) std::memcpy(t.data_ptr(), f.data, expected);  // host: t is new, on the CPU
    return device_.is_cpu() ? t : t.to(device_);
  }

  std::string Bytes(const json& d, const std::string& path) {
    at::Tensor t = Tensor(d, path);
    SIFT_CHECK(t.defined() && t.scalar_type() == at::kByte && t.dim() == 1, "state header: '", path,
               "' must be a u8 vector");
    const at::Tensor c = ToHost(t);
    return std::string(static_cast<const char*>(c.data_ptr()), c.numel());  // host: ToHost'd
  }

  const at::Device& device() const { return device_; }

 private:
  const std::vector<FrameView>& frames_;
  at::Device device_;
};

AttentionStatsRequest DecodeRequest(const json& j, const std::string& path) {
  AttentionStatsRequest r;
  r.window = Get<int64_t>(j, "window", path);
  r.last_query = Get<bool>(j, "last_query", path);
  r.column_sum = Get<bool>(j, "column_sum", path);
  r.max_from_query = Get<int64_t>(j, "max_from_query", path);
  r.last_query_logit_sum = Get<bool>(j, "last_query_logit_sum", path);
  return r;
}

std::unique_ptr<KvCache> DecodeCache(const json& j, Decoder& dec) {
  if (j.is_null()) return nullptr;
  KvCacheShape shape;
  shape.num_layers = Get<int64_t>(j, "num_layers", "cache");
  shape.num_kv_heads = Get<int64_t>(j, "num_kv_heads", "cache");
  shape.head_dim = Get<int64_t>(j, "head_dim", "cache");
  shape.dtype = ParseWireDtype(Get<std::string>(j, "dtype", "cache"));
  shape.device = dec.device();
  const json& layers = Field(j, "layers", "cache");
  SIFT_CHECK(layers.is_array() && static_cast<int64_t>(layers.size()) == shape.num_layers,
             "state header: 'cache.layers' must hold ", shape.num_layers, " layers");
  auto cache = std::make_unique<KvCache>(shape);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    const std::string path = "cache.layers[" + std::to_string(l) + "]";
    const json& layer = layers[l];
    at::Tensor k = dec.Tensor(Field(layer, "k", path), path + ".k");
    at::Tensor v = dec.Tensor(Field(layer, "v", path), path + ".v");
    at::Tensor pos = dec.Tensor(Field(layer, "positions", path), path + ".positions");
    SIFT_CHECK(k.defined() && v.defined() && pos.defined(), "state: ", path,
               " lacks k, v or positions");
    if (k.dim() == 3 && k.size(1) == 0) continue;  // an empty layer stays unallocated
    cache->Set(l, k, v, pos);
  }
  return cache;
}

}  // namespace

const char* WireDtypeName(at::ScalarType dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  throw Error(detail::Concat("state codec: unsupported dtype ", c10::toString(dtype)));
}

at::ScalarType ParseWireDtype(const std::string& name) {
  for (const DtypeName& d : kDtypes) {
    if (name == d.name) return d.dtype;
  }
  throw Error("state header: unknown dtype '" + name + "'");
}

EncodedState EncodeState(const RequestState& s) {
  Encoder enc;
  json h;
  h["format"] = kStateFormat;
  h["id"] = s.id;
  static_assert(sizeof(TokenId) == sizeof(int32_t), "tokens travel as i32");
  at::Tensor tokens = at::empty({static_cast<int64_t>(s.tokens.size())},
                                at::TensorOptions().dtype(at::kInt).device(at::kCPU));
  if (!s.tokens.empty()) {
    const size_t bytes = s.tokens.size() * sizeof(TokenId);
    std::memcpy(tokens.data_ptr(), s.tokens.data(), bytes);  // host: tokens is new, on the CPU
  }
  h["tokens"] = enc.Tensor(tokens);
  h["question_begin"] = s.question_begin;
  h["prompt_length"] = s.prompt_length;
  const GenerationOptions& g = s.generation;
  h["generation"] = {{"temperature", g.sampling.temperature},
                     {"top_k", g.sampling.top_k},
                     {"top_p", g.sampling.top_p},
                     {"seed", g.sampling.seed},
                     {"max_tokens", g.max_tokens},
                     {"stop_strings", g.stop_strings},
                     {"stop_tokens", g.stop_tokens},
                     {"ignore_eog", g.ignore_eog}};

  h["cache"] = EncodeCache(s.cache.get(), enc);
  h["next_position"] = s.next_position;
  h["cached_tokens"] = s.cached_tokens;
  h["context_state_hit"] = s.context_state_hit;
  h["last_logits"] = enc.Tensor(s.last_logits);
  json stats = json::array();
  for (const auto& [layer, st] : s.layer_stats) {
    stats.push_back({{"layer", layer},
                     {"window_sum", enc.Tensor(st.window_sum)},
                     {"last_query", enc.Tensor(st.last_query)},
                     {"column_sum", enc.Tensor(st.column_sum)},
                     {"max_prob", enc.Tensor(st.max_prob)},
                     {"last_query_logit_sum", enc.Tensor(st.last_query_logit_sum)}});
  }
  h["layer_stats"] = std::move(stats);

  json kept = json::array();
  for (const auto& [layer, idx] : s.kept_indices) {
    kept.push_back({{"layer", layer}, {"indices", enc.Tensor(idx)}});
  }
  h["kept_indices"] = std::move(kept);
  json plan_stats = json::array();
  for (const auto& [layer, r] : s.plan.stats) {
    json e = EncodeRequest(r);
    e["layer"] = layer;
    plan_stats.push_back(std::move(e));
  }
  json leaders = json::array();
  for (const auto& [follower, leader] : s.plan.reuse_leader) leaders.push_back({follower, leader});
  h["plan"] = {{"stats", std::move(plan_stats)},
               {"reuse_leader", std::move(leaders)},
               {"context_state", s.plan.context_state}};

  const GenerationResult& r = s.result;
  h["result"] = {{"tokens", r.tokens},
                 {"text", enc.Bytes(r.text)},
                 {"finish", FinishReasonName(r.finish)},
                 {"decode_ms", r.decode_ms}};
  return EncodedState{std::move(h), enc.Take()};
}

void DecodeState(const json& h, const std::vector<FrameView>& frames, const at::Device& device,
                 RequestState* state) {
  SIFT_CHECK(h.is_object() && h.value("format", "") == kStateFormat,
             "state header: expected format '", kStateFormat, "'");
  Decoder dec(frames, device);
  RequestState s;
  s.id = Get<std::string>(h, "id", "");
  at::Tensor tokens = dec.Tensor(Field(h, "tokens", ""), "tokens");
  SIFT_CHECK(tokens.defined() && tokens.scalar_type() == at::kInt && tokens.dim() == 1,
             "state header: 'tokens' must be an i32 vector");
  const std::vector<int64_t> ids = HostInts(tokens);
  s.tokens.assign(ids.begin(), ids.end());
  s.question_begin = Get<int64_t>(h, "question_begin", "");
  s.prompt_length = Get<int64_t>(h, "prompt_length", "");

  const json& g = Field(h, "generation", "");
  s.generation.sampling.temperature = Get<double>(g, "temperature", "generation");
  s.generation.sampling.top_k = Get<int64_t>(g, "top_k", "generation");
  s.generation.sampling.top_p = Get<double>(g, "top_p", "generation");
  s.generation.sampling.seed = Get<uint64_t>(g, "seed", "generation");
  s.generation.max_tokens = Get<int64_t>(g, "max_tokens", "generation");
  s.generation.stop_strings = Get<std::vector<std::string>>(g, "stop_strings", "generation");
  s.generation.stop_tokens = Get<std::vector<TokenId>>(g, "stop_tokens", "generation");
  s.generation.ignore_eog = Get<bool>(g, "ignore_eog", "generation");

  s.cache = DecodeCache(Field(h, "cache", ""), dec);
  s.next_position = Get<int64_t>(h, "next_position", "");
  // Absent from older workers' replies.
  s.cached_tokens = h.contains("cached_tokens") ? Get<int64_t>(h, "cached_tokens", "") : 0;
  s.context_state_hit = h.contains("context_state_hit") && Get<bool>(h, "context_state_hit", "");
  s.last_logits = dec.Tensor(Field(h, "last_logits", ""), "last_logits");
  for (const json& e : Field(h, "layer_stats", "")) {
    const int64_t layer = Get<int64_t>(e, "layer", "layer_stats[]");
    const std::string path = "layer_stats[" + std::to_string(layer) + "]";
    AttentionStats st;
    st.window_sum = dec.Tensor(Field(e, "window_sum", path), path + ".window_sum");
    st.last_query = dec.Tensor(Field(e, "last_query", path), path + ".last_query");
    st.column_sum = dec.Tensor(Field(e, "column_sum", path), path + ".column_sum");
    st.max_prob = dec.Tensor(Field(e, "max_prob", path), path + ".max_prob");
    st.last_query_logit_sum =
        dec.Tensor(Field(e, "last_query_logit_sum", path), path + ".last_query_logit_sum");
    s.layer_stats[layer] = std::move(st);
  }

  for (const json& e : Field(h, "kept_indices", "")) {
    const int64_t layer = Get<int64_t>(e, "layer", "kept_indices[]");
    s.kept_indices[layer] = dec.Tensor(Field(e, "indices", "kept_indices[]"),
                                       "kept_indices[" + std::to_string(layer) + "]");
  }
  const json& plan = Field(h, "plan", "");
  for (const json& e : Field(plan, "stats", "plan")) {
    s.plan.stats[Get<int64_t>(e, "layer", "plan.stats[]")] = DecodeRequest(e, "plan.stats[]");
  }
  for (const json& e : Field(plan, "reuse_leader", "plan")) {
    SIFT_CHECK(
        e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[1].is_number_integer(),
        "state header: 'plan.reuse_leader' entries must be [follower, leader]");
    s.plan.reuse_leader[e[0].get<int64_t>()] = e[1].get<int64_t>();
  }
  if (plan.contains("context_state")) {
    s.plan.context_state = Get<std::string>(plan, "context_state", "plan");
  }

  const json& r = Field(h, "result", "");
  s.result.tokens = Get<std::vector<TokenId>>(r, "tokens", "result");
  s.result.text = dec.Bytes(Field(r, "text", "result"), "result.text");
  const std::string finish = Get<std::string>(r, "finish", "result");
  bool known = false;
  for (FinishReason f : {FinishReason::kLength, FinishReason::kStop, FinishReason::kCancelled,
                         FinishReason::kContextFull}) {
    if (finish == FinishReasonName(f)) {
      s.result.finish = f;
      known = true;
    }
  }
  SIFT_CHECK(known, "state header: unknown 'result.finish' '", finish, "'");
  s.result.decode_ms = Get<double>(r, "decode_ms", "result");
  *state = std::move(s);
}

}  // namespace sift::daemon
