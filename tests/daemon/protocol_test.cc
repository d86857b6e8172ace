// Unit tests of the SIFT/1 message parser and reply builders (daemon/protocol.h).
#include "daemon/protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sift::daemon {
namespace {

using json = nlohmann::json;

Status Parse(const std::vector<std::string>& frames, ClientMessage* out) {
  std::vector<std::string_view> views(frames.begin(), frames.end());
  return ParseClientMessage(views, out);
}

Status ParseHeader(const json& header, ClientMessage* out) {
  return Parse({"SIFT/1", header.dump()}, out);
}

TEST(ProtocolTest, ParsesFullGenerate) {
  ClientMessage m;
  json h = {{"type", "generate"},
            {"id", "r1"},
            {"pipeline", "full"},
            {"context", "Some text."},
            {"question", "What?"},
            {"system", "Be brief."},
            {"sampling", {{"temperature", 0.7}, {"top_k", 40}, {"top_p", 0.9}, {"seed", 7}}},
            {"max_tokens", 16},
            {"stop", "\n\n"},
            {"stop_token_ids", {2}},
            {"params", {{"select", {{"keep_ratio", 0.2}}}}},
            {"stream", false},
            {"deadline_ms", 5000},
            {"return_kept", true},
            {"unknown_field_is_ignored", 1}};
  ASSERT_TRUE(ParseHeader(h, &m).ok());
  EXPECT_EQ(m.type, MessageType::kGenerate);
  const GenerateRequest& g = m.generate;
  EXPECT_EQ(g.id, "r1");
  EXPECT_EQ(g.pipeline, "full");
  EXPECT_EQ(g.input, InputKind::kContextQuestion);
  EXPECT_EQ(g.context, "Some text.");
  EXPECT_EQ(g.question, "What?");
  EXPECT_EQ(g.system, "Be brief.");
  EXPECT_DOUBLE_EQ(g.temperature, 0.7);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_DOUBLE_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.seed, 7u);
  EXPECT_EQ(g.max_tokens, 16);
  EXPECT_EQ(g.stop, std::vector<std::string>({"\n\n"}));
  EXPECT_EQ(g.stop_token_ids, std::vector<int32_t>({2}));
  EXPECT_EQ(g.params["select"]["keep_ratio"], 0.2);
  EXPECT_FALSE(g.stream);
  EXPECT_EQ(g.deadline_ms, 5000);
  EXPECT_TRUE(g.return_kept);
}

TEST(ProtocolTest, InputModes) {
  ClientMessage m;
  ASSERT_TRUE(ParseHeader({{"type", "generate"},
                           {"id", "a"},
                           {"pipeline", "p"},
                           {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                          &m)
                  .ok());
  EXPECT_EQ(m.generate.input, InputKind::kMessages);
  ASSERT_EQ(m.generate.messages.size(), 1u);
  ASSERT_TRUE(ParseHeader({{"type", "generate"},
                           {"id", "a"},
                           {"pipeline", "p"},
                           {"prompt", "Once upon"},
                           {"question_tokens", 4}},
                          &m)
                  .ok());
  EXPECT_EQ(m.generate.input, InputKind::kPrompt);
  EXPECT_EQ(m.generate.question_tokens, 4);
  ASSERT_TRUE(
      ParseHeader({{"type", "generate"}, {"id", "a"}, {"pipeline", "p"}, {"tokens", {1, 2, 3}}}, &m)
          .ok());
  EXPECT_EQ(m.generate.tokens, std::vector<int32_t>({1, 2, 3}));
  // Binary frame: int32 little-endian.
  std::string blob = {'\x05', 0, 0, 0, '\x00', '\x01', 0, 0};
  ASSERT_TRUE(
      Parse(
          {"SIFT/1",
           json({{"type", "generate"}, {"id", "a"}, {"pipeline", "p"}, {"tokens", {{"frame", 0}}}})
               .dump(),
           blob},
          &m)
          .ok());
  EXPECT_EQ(m.generate.tokens, std::vector<int32_t>({5, 256}));
}

TEST(ProtocolTest, RejectsBadInput) {
  struct Case {
    json header;
    std::string reason;
  };
  const json base = {{"type", "generate"}, {"id", "x"}, {"pipeline", "p"}};
  auto with = [&](json extra) {
    json h = base;
    h.update(extra);
    return h;
  };
  const std::vector<Case> cases = {
      {base, "missing_field"},
      {with({{"context", "c"}}), "bad_input"},
      {with({{"prompt", "a"}, {"question", "b"}}), "bad_input"},
      {with({{"prompt", ""}}), "bad_input"},
      {with({{"prompt", 5}}), "bad_field"},
      {with({{"prompt", "a"}, {"max_tokens", 0}}), "bad_field"},
      {with({{"prompt", "a"}, {"max_tokens", 2.5}}), "bad_field"},
      {with({{"prompt", "a"}, {"sampling", {{"temperature", -1}}}}), "bad_field"},
      {with({{"prompt", "a"}, {"sampling", {{"top_p", 0}}}}), "bad_field"},
      {with({{"prompt", "a"}, {"sampling", "hot"}}), "bad_field"},
      {with({{"prompt", "a"}, {"stream", "yes"}}), "bad_field"},
      {with({{"prompt", "a"}, {"params", {{"select", 3}}}}), "bad_field"},
      {with({{"prompt", "a"}, {"deadline_ms", -5}}), "bad_field"},
      {with({{"prompt", "a"}, {"stop", {""}}}), "bad_field"},
      {with({{"prompt", "a"}, {"return_kept", "yes"}}), "bad_field"},
      {with({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), "bad_field"},
      {with({{"messages", json::array()}}), "bad_field"},
      {with({{"tokens", {1, -2}}}), "bad_field"},
      {with({{"tokens", {{"frame", 3}}}}), "bad_input"},
      {{{"type", "generate"}, {"id", "x"}, {"prompt", "a"}}, "missing_field"},
      {{{"type", "generate"}, {"pipeline", "p"}, {"prompt", "a"}}, "missing_field"},
      {{{"type", "generate"}, {"id", ""}, {"pipeline", "p"}, {"prompt", "a"}}, "bad_field"},
      {{{"type", "generate"}, {"id", 5}, {"pipeline", "p"}, {"prompt", "a"}}, "bad_field"},
      {{{"type", "cancel"}}, "missing_field"},
      {{{"type", "launch"}}, "unknown_type"},
      {{{"id", "x"}}, "missing_field"},
      {{{"type", 3}}, "bad_field"},
  };
  for (const Case& c : cases) {
    ClientMessage m;
    Status st = ParseHeader(c.header, &m);
    EXPECT_FALSE(st.ok()) << c.header.dump();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.header.dump();
    EXPECT_EQ(st.reason(), c.reason) << c.header.dump() << " -> " << st.message();
    EXPECT_FALSE(st.message().empty());
  }
}

TEST(ProtocolTest, RejectsBadFraming) {
  ClientMessage m;
  EXPECT_EQ(Parse({"SIFT/1"}, &m).reason(), "bad_frames");
  EXPECT_EQ(Parse({"HELLO", "{}"}, &m).reason(), "bad_magic");
  EXPECT_EQ(Parse({"SIFT/2", "{}"}, &m).reason(), "unsupported_version");
  EXPECT_EQ(Parse({"SIFT/1", "{not json"}, &m).reason(), "bad_json");
  EXPECT_EQ(Parse({"SIFT/1", "\xff\xfe"}, &m).reason(), "bad_json");
  EXPECT_EQ(Parse({"SIFT/1", "[1,2]"}, &m).reason(), "bad_header");
}

TEST(ProtocolTest, KeepsIdOfRejectedMessages) {
  ClientMessage m;
  Status st = ParseHeader({{"type", "generate"}, {"id", "r9"}, {"pipeline", "p"}}, &m);
  EXPECT_FALSE(st.ok());
  json e = ErrorHeader(m, st);
  EXPECT_EQ(e["id"], "r9");
  EXPECT_EQ(e["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(e["retryable"], false);
  ClientMessage none;
  json e2 = ErrorHeader(none, Status(StatusCode::kInvalidArgument, "bad_json", "x"));
  EXPECT_TRUE(e2["id"].is_null());
}

TEST(ProtocolTest, ExtractsIdWithoutParsingEverything) {
  std::string id;
  EXPECT_TRUE(ExtractId(R"({"type":"generate","params":{"id":"inner"},"id":"outer","x":[)", &id));
  EXPECT_EQ(id, "outer");
  EXPECT_FALSE(ExtractId(R"({"type":"generate","params":{"id":"inner"}})", &id));
  EXPECT_FALSE(ExtractId(R"({"id":5})", &id));
  EXPECT_FALSE(ExtractId("not json", &id));
}

TEST(ProtocolTest, PingAndList) {
  ClientMessage m;
  ASSERT_TRUE(ParseHeader({{"type", "ping"}, {"nonce", 17}}, &m).ok());
  EXPECT_EQ(m.type, MessageType::kPing);
  EXPECT_EQ(m.nonce, 17);
  ASSERT_TRUE(ParseHeader({{"type", "list"}, {"id", "l1"}}, &m).ok());
  EXPECT_EQ(m.type, MessageType::kList);
  EXPECT_EQ(m.id, "l1");
}

TEST(ProtocolTest, ReplyHeaders) {
  FinalReport r;
  r.text = "hi";
  r.finish_reason = "stop";
  r.prompt_tokens = 10;
  r.completion_tokens = 3;
  r.decode_ms = 20;
  r.stages = {{"prefill", "prefill_full@1.0.0", "prefill", 12.34567}};
  json f = FinalHeader("r1", "full", r);
  EXPECT_EQ(f["type"], "final");
  EXPECT_EQ(f["usage"]["total_tokens"], 13);
  EXPECT_EQ(f["stats"]["stages"][0]["ms"], 12.346);
  EXPECT_DOUBLE_EQ(f["stats"]["decode_tok_s"].get<double>(), 100.0);
  EXPECT_TRUE(IsTerminal(f));
  EXPECT_FALSE(f.contains("kept"));  // only when asked for (return_kept)
  r.kept = {{"tokens", 10}, {"layers", json::array()}};
  EXPECT_EQ(FinalHeader("r1", "full", r)["kept"]["tokens"], 10);
  json err = ErrorHeader("r1", Status(StatusCode::kResourceExhausted, "queue_full", "full"),
                         {{"queue_size", 4}}, 250);
  EXPECT_EQ(err["retryable"], true);
  EXPECT_EQ(err["retry_after_ms"], 250);
  EXPECT_EQ(err["details"]["queue_size"], 4);
  EXPECT_TRUE(IsTerminal(err));
  EXPECT_FALSE(IsTerminal(ChunkHeader("r1", 0, "a", {1})));
  // Partial UTF-8 never breaks serialisation.
  EXPECT_NO_THROW(Serialize(ChunkHeader("r1", 0, "\xe2\x82", {})));
}

std::string Nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + "1" +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(ProtocolLimitsTest, NestingIsLimitedWhileParsing) {
  ClientMessage m;
  // The header object is level 1: 63 more levels fit, 64 do not.
  ASSERT_TRUE(Parse({"SIFT/1", R"({"type":"ping","nonce":)" + Nested(63) + "}"}, &m).ok());
  EXPECT_EQ(m.nonce.dump(), Nested(63));
  Status st = Parse({"SIFT/1", R"({"type":"ping","id":"d","nonce":)" + Nested(64) + "}"}, &m);
  EXPECT_EQ(st.reason(), "too_deep");
  EXPECT_EQ(m.id, "d");  // still echoed
  // Far deeper than any stack could hold a recursive copy of: refused, nothing built.
  st = Parse({"SIFT/1", R"({"type":"ping","nonce":)" + Nested(1000000) + "}"}, &m);
  EXPECT_EQ(st.reason(), "too_deep");
  st = Parse({"SIFT/1", std::string(2000000, '{')}, &m);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST(ProtocolLimitsTest, SizeAndValueCountsAreLimited) {
  ClientMessage m;
  JsonLimits limits;
  limits.max_bytes = 1000;
  std::string big = R"({"type":"ping","id":"b","nonce":")" + std::string(2000, 'x') + "\"}";
  std::vector<std::string_view> frames = {"SIFT/1", big};
  Status st = ParseClientMessage(frames, &m, limits);
  EXPECT_EQ(st.reason(), "header_too_large");
  EXPECT_EQ(m.id, "b");
  limits = JsonLimits();
  limits.max_values = 100;
  std::string many = R"({"type":"ping","nonce":[)";
  for (int i = 0; i < 200; ++i) many += "1,";
  many += "1]}";
  frames = {"SIFT/1", many};
  EXPECT_EQ(ParseClientMessage(frames, &m, limits).reason(), "too_many_values");
  limits = JsonLimits();
  limits.max_containers = 10;
  std::string arrays = R"({"type":"ping","nonce":[)";
  for (int i = 0; i < 20; ++i) arrays += "[],";
  arrays += "[]]}";
  frames = {"SIFT/1", arrays};
  EXPECT_EQ(ParseClientMessage(frames, &m, limits).reason(), "too_many_values");
}

TEST(ProtocolLimitsTest, NulBytesTrailingBytesAndBadUtf8AreRefused) {
  ClientMessage m;
  for (const std::string& header :
       {std::string(R"({"type":"ping"})") + std::string(1, '\0') + "\xff\xfe",
        std::string(R"({"type":"ping","nonce":"a)") + std::string(1, '\0') + "b\"}",
        std::string(R"({"type":"ping"} x)"), std::string("{\"type\":\"ping\",\"nonce\":\"\xc3\"}"),
        std::string("{\"type\":\"ping\",\"nonce\":\"\xed\xa0\x80\"}"),  // a surrogate
        std::string("{\"type\":\"ping\"}\xc3\xa9")}) {
    EXPECT_EQ(Parse({"SIFT/1", header}, &m).reason(), "bad_json") << header;
  }
  ASSERT_TRUE(Parse({"SIFT/1", "{\"type\":\"ping\",\"nonce\":\"caf\xc3\xa9\"} \n"}, &m).ok());
  EXPECT_EQ(m.nonce, "caf\xc3\xa9");
}

TEST(ProtocolLimitsTest, TinyTemperaturesAreRefused) {
  ClientMessage m;
  json h = {{"type", "generate"}, {"id", "t"}, {"pipeline", "full"}, {"prompt", "hi"}};
  for (double t : {1e-45, 1e-38, 1e-10, 0.000999}) {
    h["sampling"] = {{"temperature", t}};
    Status st = ParseHeader(h, &m);
    EXPECT_EQ(st.reason(), "bad_field") << t;
    EXPECT_NE(st.message().find("0 (greedy) or a number in [0.001, 100]"), std::string::npos)
        << st.message();
  }
  for (double t : {0.0, 0.001, 0.7, 100.0}) {
    h["sampling"] = {{"temperature", t}};
    EXPECT_TRUE(ParseHeader(h, &m).ok()) << t;
  }
}

TEST(ProtocolLimitsTest, IdScanReadsOnlyTheStart) {
  std::string id;
  EXPECT_TRUE(ExtractId(R"({"id":"early","x":)" + std::string(100000, '['), &id));
  EXPECT_EQ(id, "early");
  EXPECT_FALSE(ExtractId(R"({"x":")" + std::string(kIdScanBytes, 'a') + R"(","id":"late"})", &id));
}

// top_p in (0, ~7e-46] rounds to 0 in float (no token kept): raised to kMinTopP, which keeps
// exactly the most probable token as every such value means to.
TEST(ProtocolTest, TinyTopPIsRaisedToTheSmallestFloatSafeValue) {
  for (double top_p : {1e-46, 7e-46, 1e-300, 1e-12, 5e-324}) {
    const json h = {{"type", "generate"},
                    {"id", "x"},
                    {"pipeline", "p"},
                    {"prompt", "a"},
                    {"sampling", {{"top_p", top_p}}}};
    ClientMessage m;
    const std::string text = h.dump();
    ASSERT_TRUE(ParseClientMessage({kMagic, text}, &m).ok()) << top_p;
    EXPECT_EQ(m.generate.top_p, kMinTopP) << top_p;
    EXPECT_GT(static_cast<float>(m.generate.top_p), 0.0f);
  }
  const json h = {{"type", "generate"},
                  {"id", "x"},
                  {"pipeline", "p"},
                  {"prompt", "a"},
                  {"sampling", {{"top_p", 0.5}}}};
  ClientMessage m;
  const std::string text = h.dump();
  ASSERT_TRUE(ParseClientMessage({kMagic, text}, &m).ok());
  EXPECT_EQ(m.generate.top_p, 0.5);
}

}  // namespace
}  // namespace sift::daemon
