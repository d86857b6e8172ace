// State codec: everything a stage can produce survives the round trip bit for bit, including
// bf16 and fp32 tensors and ragged per-layer caches; the runner's cost records stay home;
// malformed input fails naming the field.
#include "daemon/state_codec.h"

#include <gtest/gtest.h>

#include "sift/error.h"

namespace sift::daemon {
namespace {

using nlohmann::json;

std::vector<FrameView> Views(const EncodedState& e) {
  std::vector<FrameView> v;
  for (const at::Tensor& t : e.tensors)
    v.push_back({t.data_ptr(), static_cast<size_t>(t.nbytes())});
  return v;
}

void ExpectSame(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.scalar_type(), b.scalar_type()) << what;
  EXPECT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(at::equal(a, b)) << what;
}

RequestState FullState() {
  at::manual_seed(7);
  RequestState s;
  s.id = "req-42";
  s.tokens = {1, 2, 3, 49151, 0, 7};
  s.question_begin = 4;
  s.prompt_length = 9;
  s.generation.sampling = {0.7, 40, 0.9, 1234567890123ull};
  s.generation.max_tokens = 17;
  s.generation.stop_strings = {"\n\n", "ünïcode"};
  s.generation.stop_tokens = {2, 5};
  s.generation.ignore_eog = true;

  KvCacheShape shape{3, 2, 4, at::kBFloat16, at::kCPU};
  s.cache = std::make_unique<KvCache>(shape);
  // Ragged: layer 0 has 5 entries, layer 1 none, layer 2 evicted per head down to 2.
  s.cache->Append(0, at::randn({5, 2, 4}).to(at::kBFloat16), at::randn({5, 2, 4}).to(at::kBFloat16),
                  at::arange(5, at::kLong));
  s.cache->Append(2, at::randn({6, 2, 4}).to(at::kBFloat16), at::randn({6, 2, 4}).to(at::kBFloat16),
                  at::arange(6, at::kLong));
  s.cache->Select(2, at::tensor(std::vector<int64_t>{1, 4, 0, 5}).view({2, 2}));
  s.next_position = 9;
  s.last_logits = at::randn({11});
  AttentionStats st;
  st.window_sum = at::rand({4, 5});
  st.max_prob = at::rand({5});
  s.layer_stats[0] = st;
  AttentionStats st2;
  st2.last_query_logit_sum = at::rand({6});
  s.layer_stats[2] = st2;
  s.kept_indices[2] = at::tensor(std::vector<int64_t>{1, 4, 0, 5}).view({2, 2});
  s.plan.stats[0] = AttentionStatsRequest{32, true, false, -1, false};
  s.plan.stats[2] = AttentionStatsRequest{0, false, true, 3, true};
  s.plan.reuse_leader = {{1, 0}, {3, 2}};
  s.plan.context_state = "chunkkv@1.0.0#ab12/context/9f";
  s.context_state_hit = true;
  s.cached_tokens = 4;
  s.result.tokens = {10, 11};
  s.result.text = "héllo \xf0\x9f\x99\x82 \xff";  // not even valid UTF-8: bytes travel as bytes
  s.result.finish = FinishReason::kContextFull;
  s.result.decode_ms = 1.5;
  s.stats.stages.push_back({"prefill", "prefill_full@1.0.0", StageKind::kPrefill, 11.5, 4, 400});
  return s;
}

TEST(StateCodecTest, RoundTripKeepsEveryField) {
  const RequestState a = FullState();
  EncodedState e = EncodeState(a);
  // The header is plain JSON; a reader in another language needs nothing else.
  const json header = json::parse(e.header.dump());
  RequestState b;
  DecodeState(header, Views(e), at::kCPU, &b);

  EXPECT_EQ(b.id, a.id);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.question_begin, 4);
  EXPECT_EQ(b.prompt_length, 9);
  EXPECT_EQ(b.generation.sampling.temperature, 0.7);
  EXPECT_EQ(b.generation.sampling.top_k, 40);
  EXPECT_EQ(b.generation.sampling.top_p, 0.9);
  EXPECT_EQ(b.generation.sampling.seed, 1234567890123ull);
  EXPECT_EQ(b.generation.max_tokens, 17);
  EXPECT_EQ(b.generation.stop_strings, a.generation.stop_strings);
  EXPECT_EQ(b.generation.stop_tokens, a.generation.stop_tokens);
  EXPECT_TRUE(b.generation.ignore_eog);

  ASSERT_NE(b.cache, nullptr);
  EXPECT_EQ(b.cache->shape().dtype, at::kBFloat16);
  for (int64_t l = 0; l < 3; ++l) {
    ASSERT_EQ(b.cache->size(l), a.cache->size(l)) << l;
    ExpectSame(b.cache->Keys(l), a.cache->Keys(l), "k" + std::to_string(l));
    ExpectSame(b.cache->Values(l), a.cache->Values(l), "v" + std::to_string(l));
    ExpectSame(b.cache->Positions(l), a.cache->Positions(l), "pos" + std::to_string(l));
  }
  EXPECT_EQ(b.cache->size(1), 0);
  EXPECT_EQ(b.next_position, 9);
  ExpectSame(b.last_logits, a.last_logits, "last_logits");
  ASSERT_EQ(b.layer_stats.size(), 2u);
  ExpectSame(b.layer_stats[0].window_sum, a.layer_stats.at(0).window_sum, "window_sum");
  ExpectSame(b.layer_stats[0].max_prob, a.layer_stats.at(0).max_prob, "max_prob");
  EXPECT_FALSE(b.layer_stats[0].column_sum.defined());
  ExpectSame(b.layer_stats[2].last_query_logit_sum, a.layer_stats.at(2).last_query_logit_sum,
             "last_query_logit_sum");
  ExpectSame(b.kept_indices[2], a.kept_indices.at(2), "kept");
  EXPECT_EQ(b.plan.stats[0].window, 32);
  EXPECT_TRUE(b.plan.stats[0].last_query);
  EXPECT_EQ(b.plan.stats[2].max_from_query, 3);
  EXPECT_TRUE(b.plan.stats[2].column_sum);
  EXPECT_TRUE(b.plan.stats[2].last_query_logit_sum);
  EXPECT_EQ(b.plan.reuse_leader, a.plan.reuse_leader);
  EXPECT_EQ(b.plan.context_state, a.plan.context_state);
  EXPECT_TRUE(b.context_state_hit);
  EXPECT_EQ(b.cached_tokens, 4);
  EXPECT_EQ(b.result.tokens, a.result.tokens);
  EXPECT_EQ(b.result.text, a.result.text);
  EXPECT_EQ(b.result.finish, FinishReason::kContextFull);
  EXPECT_EQ(b.result.decode_ms, 1.5);
}

// The pipeline runner's cost records are the caller's: they are not encoded, and the caller
// takes a worker's reply over with AdoptProducts, which keeps its own records.
TEST(StateCodecTest, StatsStayWithTheCaller) {
  RequestState a = FullState();
  EncodedState e = EncodeState(a);
  EXPECT_EQ(e.header.count("stats"), 0u);
  EXPECT_EQ(e.header["format"], "sift.state/2");
  RequestState reply;
  DecodeState(e.header, Views(e), at::kCPU, &reply);
  EXPECT_TRUE(reply.stats.stages.empty());
  reply.result.text = "from the worker";
  a.AdoptProducts(std::move(reply));
  EXPECT_EQ(a.result.text, "from the worker");
  ASSERT_EQ(a.stats.stages.size(), 1u);
  EXPECT_EQ(a.stats.stages[0].ms, 11.5);
  EXPECT_EQ(a.stats.stages[0].kv_bytes, 400);
}

TEST(StateCodecTest, DecodedCacheKeepsGrowing) {
  const RequestState a = FullState();
  EncodedState e = EncodeState(a);
  RequestState b;
  DecodeState(e.header, Views(e), at::kCPU, &b);
  b.cache->Append(0, at::ones({1, 2, 4}, at::kBFloat16), at::ones({1, 2, 4}, at::kBFloat16),
                  at::full({1}, 9, at::kLong));
  EXPECT_EQ(b.cache->size(0), 6);
  EXPECT_EQ(b.cache->NextPosition(), 10);
}

TEST(StateCodecTest, EmptyStateRoundTrips) {
  RequestState a;
  EncodedState e = EncodeState(a);
  RequestState b;
  b.tokens = {1};
  DecodeState(e.header, Views(e), at::kCPU, &b);
  EXPECT_TRUE(b.tokens.empty());
  EXPECT_EQ(b.cache, nullptr);
  EXPECT_FALSE(b.last_logits.defined());
  EXPECT_EQ(b.result.text, "");
}

TEST(StateCodecTest, TensorDescriptorsAreDtypeAndShape) {
  RequestState a;
  a.last_logits = at::zeros({2, 3}, at::kBFloat16);
  EncodedState e = EncodeState(a);
  const json& d = e.header["last_logits"];
  EXPECT_EQ(d["dtype"], "bf16");
  EXPECT_EQ(d["shape"], json({2, 3}));
  EXPECT_EQ(e.tensors[d["frame"].get<size_t>()].nbytes(), 12u);
}

std::string DecodeError(const json& header, const std::vector<FrameView>& frames) {
  RequestState s;
  try {
    DecodeState(header, frames, at::kCPU, &s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StateCodecTest, MalformedInputNamesTheField) {
  RequestState a;
  a.last_logits = at::zeros({4});
  EncodedState e = EncodeState(a);
  std::vector<FrameView> views = Views(e);
  const size_t frame = e.header["last_logits"]["frame"].get<size_t>();

  std::vector<FrameView> short_frames = views;
  short_frames[frame].size -= 1;
  EXPECT_NE(DecodeError(e.header, short_frames).find("'last_logits' (f32 [4]) needs 16 bytes"),
            std::string::npos);

  json h = e.header;
  h["last_logits"]["dtype"] = "f8";
  EXPECT_EQ(DecodeError(h, views), "state header: unknown dtype 'f8'");
  h = e.header;
  h["last_logits"]["frame"] = 99;
  EXPECT_NE(DecodeError(h, views).find("'last_logits' refers to frame 99"), std::string::npos);
  h = e.header;
  h.erase("next_position");
  EXPECT_EQ(DecodeError(h, views), "state header: missing '.next_position'");
  h = e.header;
  h["generation"]["max_tokens"] = "many";
  EXPECT_NE(DecodeError(h, views).find("'generation.max_tokens' has the wrong type"),
            std::string::npos);
  h = e.header;
  h["format"] = "pickle";
  EXPECT_NE(DecodeError(h, views).find("expected format 'sift.state/2'"), std::string::npos);
}

}  // namespace
}  // namespace sift::daemon
