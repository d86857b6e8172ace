// Unit tests of the OpenAI request translation (daemon/openai_request.h), the response, SSE and
// chunked-transfer framing and the error mapping (daemon/openai_response.h), the API key file
// (daemon/api_keys.h) and siftd's --openai options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "daemon/api_keys.h"
#include "daemon/openai_request.h"
#include "daemon/openai_response.h"
#include "daemon/options.h"
#include "support/temp_dir.h"

namespace sift::daemon {
namespace {

using json = nlohmann::json;

struct Parsed {
  Status status;
  OpenAiRequest request;
  std::string param;
};

Parsed Chat(const json& body, int64_t deadline_ms = 0) {
  Parsed p;
  p.status = ParseOpenAiRequest(OpenAiEndpoint::kChat, body.dump(), "chatcmpl-1", deadline_ms,
                                &p.request, &p.param);
  return p;
}

Parsed Completion(const json& body) {
  Parsed p;
  p.status = ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body.dump(), "cmpl-1", 0, &p.request,
                                &p.param);
  return p;
}

json UserChat(const std::string& model = "full") {
  return {{"model", model}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
}

TEST(OpenAiRequestTest, ChatMapsEveryField) {
  json body = {
      {"model", "sift/recent"},
      {"messages",
       {{{"role", "developer"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Hello, "}}, {{"type", "text"}, {"text", "world"}}}}},
        {{"role", "assistant"}, {"content", nullptr}},
        {{"role", "user"}, {"content", "Again?"}}}},
      {"max_completion_tokens", 12},
      {"max_tokens", 99},
      {"temperature", 0},
      {"top_p", 0.5},
      {"seed", 7},
      {"stop", {"\n\n", "END"}},
      {"n", 1},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"presence_penalty", 0},
      {"user", "ignored"},
      {"sift",
       {{"params", {{"select", {{"keep_ratio", 0.2}}}}},
        {"deadline_ms", 9000},
        {"top_k", 40},
        {"ignore_eos", true},
        {"return_kept", true}}}};
  Parsed p = Chat(body, 5000);
  ASSERT_TRUE(p.status.ok()) << p.status.ToString();
  const GenerateRequest& g = p.request.generate;
  EXPECT_EQ(p.request.model, "sift/recent");
  EXPECT_EQ(g.pipeline, "recent");
  EXPECT_EQ(g.id, "chatcmpl-1");
  ASSERT_EQ(g.input, InputKind::kMessages);
  ASSERT_EQ(g.messages.size(), 4u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "Hello, world");
  EXPECT_EQ(g.messages[2].role, "assistant");
  EXPECT_EQ(g.messages[2].content, "");
  EXPECT_EQ(g.max_tokens, 12);  // max_completion_tokens wins
  EXPECT_DOUBLE_EQ(g.temperature, 0);
  EXPECT_DOUBLE_EQ(g.top_p, 0.5);
  EXPECT_EQ(g.seed, 7u);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.stop, std::vector<std::string>({"\n\n", "END"}));
  EXPECT_EQ(g.params["select"]["keep_ratio"], 0.2);
  EXPECT_EQ(g.deadline_ms, 5000);  // the smaller of header and field
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(p.request.stream);
  EXPECT_TRUE(p.request.include_usage);
  EXPECT_TRUE(g.return_kept);
}

TEST(OpenAiRequestTest, Defaults) {
  Parsed chat = Chat(UserChat());
  ASSERT_TRUE(chat.status.ok()) << chat.status.ToString();
  EXPECT_DOUBLE_EQ(chat.request.generate.temperature, 1.0);  // OpenAI's default
  EXPECT_EQ(chat.request.generate.max_tokens, 1 << 20);      // until the context is full
  EXPECT_FALSE(chat.request.stream);
  EXPECT_FALSE(chat.request.generate.stream);  // no chunks for a whole response
  EXPECT_EQ(chat.request.generate.deadline_ms, 0);

  Parsed completion = Completion({{"model", "full"}, {"prompt", "Once upon"}});
  ASSERT_TRUE(completion.status.ok());
  EXPECT_EQ(completion.request.generate.input, InputKind::kPrompt);
  EXPECT_EQ(completion.request.generate.prompt, "Once upon");
  EXPECT_EQ(completion.request.generate.max_tokens, kOpenAiCompletionsDefaultMaxTokens);
}

TEST(OpenAiRequestTest, CompletionPromptForms) {
  Parsed one = Completion({{"model", "full"}, {"prompt", {"only one"}}});
  ASSERT_TRUE(one.status.ok());
  EXPECT_EQ(one.request.generate.prompt, "only one");
  Parsed ids = Completion({{"model", "full"}, {"prompt", {1, 2, 3}}});
  ASSERT_TRUE(ids.status.ok());
  EXPECT_EQ(ids.request.generate.input, InputKind::kTokens);
  EXPECT_EQ(ids.request.generate.tokens, std::vector<int32_t>({1, 2, 3}));
  Parsed nested = Completion({{"model", "full"}, {"prompt", {{4, 5}}}});
  ASSERT_TRUE(nested.status.ok());
  EXPECT_EQ(nested.request.generate.tokens, std::vector<int32_t>({4, 5}));

  Parsed batch = Completion({{"model", "full"}, {"prompt", {"a", "b"}}});
  EXPECT_EQ(batch.status.reason(), "unsupported");
  EXPECT_EQ(batch.param, "prompt");
  Parsed negative = Completion({{"model", "full"}, {"prompt", {1, -2}}});
  EXPECT_EQ(negative.status.reason(), "bad_field");
  EXPECT_EQ(negative.param, "prompt[1]");  // the SIFT/1 name "tokens[1]" renamed
}

TEST(OpenAiRequestTest, ErrorsNameTheOpenAiField) {
  struct Case {
    json patch;
    std::string reason, param;
  };
  const Case cases[] = {
      {{{"temperature", 500}}, "bad_field", "temperature"},
      {{{"top_p", 0}}, "bad_field", "top_p"},
      {{{"seed", -1}}, "bad_field", "seed"},
      {{{"max_tokens", 0}}, "bad_field", "max_tokens"},
      {{{"max_completion_tokens", "ten"}}, "bad_field", "max_completion_tokens"},
      {{{"stop", {1}}}, "bad_field", "stop"},
      {{{"stream", "yes"}}, "bad_field", "stream"},
      {{{"stream_options", {{"include_usage", 1}}}}, "bad_field", "stream_options.include_usage"},
      {{{"n", 2}}, "unsupported", "n"},
      {{{"logprobs", true}}, "unsupported", "logprobs"},
      {{{"tools", {{{"type", "function"}}}}}, "unsupported", "tools"},
      {{{"frequency_penalty", 0.5}}, "unsupported", "frequency_penalty"},
      {{{"response_format", {{"type", "json_object"}}}}, "unsupported", "response_format"},
      {{{"logit_bias", {{"42", 1}}}}, "unsupported", "logit_bias"},
      {{{"sift", {{"params", {{"select", 3}}}}}}, "bad_field", "sift.params.select"},
      {{{"sift", {{"deadline_ms", -5}}}}, "bad_field", "sift.deadline_ms"},
      {{{"sift", {{"top_k", -1}}}}, "bad_field", "sift.top_k"},
      {{{"sift", {{"keep_ratio", 0.2}}}}, "bad_field", "sift.keep_ratio"},
      {{{"sift", 1}}, "bad_field", "sift"},
      {{{"model", 7}}, "bad_field", "model"},
      {{{"model", "sift/"}}, "bad_field", "model"},
      {{{"messages", json::array()}}, "bad_field", "messages"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, "unsupported", "messages[0].role"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
       "unsupported",
       "messages[0].content[0]"},
      {{{"messages", {{{"role", "user"}}}}}, "bad_field", "messages[0].content"},
  };
  for (const Case& c : cases) {
    json body = UserChat();
    body.update(c.patch);
    Parsed p = Chat(body);
    EXPECT_EQ(p.status.code(), StatusCode::kInvalidArgument) << c.patch.dump();
    EXPECT_EQ(p.status.reason(), c.reason) << c.patch.dump() << ": " << p.status.message();
    EXPECT_EQ(p.param, c.param) << c.patch.dump() << ": " << p.status.message();
    EXPECT_NE(p.status.message().find(c.param), std::string::npos) << p.status.message();
  }
  json no_model = UserChat();
  no_model.erase("model");
  EXPECT_EQ(Chat(no_model).status.reason(), "missing_field");
  EXPECT_EQ(Chat(no_model).param, "model");
}

TEST(OpenAiRequestTest, RejectsBadJsonAndDeepNesting) {
  OpenAiRequest r;
  std::string param;
  for (const std::string& body :
       {std::string("{"), std::string("[1,2]"), std::string("\xff\xfe"), std::string("")}) {
    Status s = ParseOpenAiRequest(OpenAiEndpoint::kChat, body, "x", 0, &r, &param);
    EXPECT_EQ(s.reason(), "bad_json") << body;
  }
  // The limits of SIFT/1 headers (json_limits.h), checked while parsing.
  auto reason = [&](const std::string& body) {
    return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, "x", 0, &r, &param).reason();
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(reason(deep), "too_deep");
  EXPECT_EQ(reason(R"({"model": "m", "prompt": "hi", "x": )" + std::string(64, '[') +
                   std::string(64, ']') + "}"),
            "too_deep");
  std::string many = R"({"model": "m", "prompt": "hi", "x": [0)";
  for (int i = 0; i < (1 << 20); ++i) many += ",0";
  EXPECT_EQ(reason(many + "]}"), "too_many_values");
  EXPECT_EQ(reason(std::string(R"({"model": "m", "prompt": "hi"})") + '\0' + "{"), "nul_byte");
  // Brackets inside strings (with escaped quotes) do not count.
  EXPECT_TRUE(ParseOpenAiRequest(OpenAiEndpoint::kCompletions,
                                 R"({"model": "m", "prompt": "[[[[[[\"[[[[[[", "x": [[1]]})", "x",
                                 0, &r, &param)
                  .ok());
  EXPECT_EQ(r.model, "m");
}

// ---- responses ----

json Final() {
  return {{"type", "final"},
          {"id", "chatcmpl-1"},
          {"pipeline", "recent"},
          {"text", "Blue."},
          {"finish_reason", "context_full"},
          {"usage",
           {{"prompt_tokens", 10},
            {"cached_tokens", 6},
            {"completion_tokens", 2},
            {"total_tokens", 12}}},
          {"stats",
           {{"ttft_ms", 12.5},
            {"tokens_kept", 8},
            {"kv_bytes", 1000},
            {"stages", {{{"stage", "prefill"}, {"ms", 3.0}}}}}}};
}

// A body between the ZeroMQ header limit (8 MiB) and the HTTP body limit (16 MiB) is
// translated: its size was bounded by the HTTP port, not by --max-header-bytes.
TEST(OpenAiRequestTest, BodiesLargerThanTheZeroMqHeaderLimitAreTranslated) {
  const std::string big(9 << 20, 'a');
  const std::string body = json({{"model", "full"}, {"prompt", big}, {"max_tokens", 2}}).dump();
  OpenAiRequest r;
  std::string param;
  const Status status =
      ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, "cmpl-1", 0, &r, &param);
  ASSERT_TRUE(status.ok()) << status.reason() << ": " << status.message();
  EXPECT_EQ(r.generate.prompt.size(), big.size());
}

TEST(OpenAiResponseTest, ChatCompletionBody) {
  OpenAiReply reply{OpenAiEndpoint::kChat, "chatcmpl-1", "sift/recent", 1700000000, false};
  json body = CompletionBody(reply, Final());
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "sift/recent");
  EXPECT_EQ(body["created"], 1700000000);
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Blue."}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(body["usage"]["total_tokens"], 12);
  // OpenAI's own field for prompt tokens served from a cache, and sift's report.
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 6);
  EXPECT_EQ(body["usage"]["sift"]["cached_tokens"], 6);
  EXPECT_EQ(body["usage"]["sift"]["ttft_ms"], 12.5);
  EXPECT_EQ(body["usage"]["sift"]["tokens_kept"], 8);
  EXPECT_EQ(body["usage"]["sift"]["kv_bytes"], 1000);
  EXPECT_EQ(body["usage"]["sift"]["stages"][0]["ms"], 3.0);
  EXPECT_EQ(body["usage"]["sift"]["finish_reason"], "context_full");
  EXPECT_EQ(body["usage"]["sift"]["pipeline"], "recent");
  EXPECT_FALSE(body.contains("sift"));  // `kept` only when the request asked for it
}

// return_kept: the final's `kept` becomes the response's top-level sift.kept, and in a stream
// rides on the chunk with finish_reason.
TEST(OpenAiResponseTest, KeptReportIsTheTopLevelSiftField) {
  json final_header = Final();
  final_header["kept"] = {{"tokens", 10}, {"layers", json::array()}};
  OpenAiReply reply{OpenAiEndpoint::kChat, "chatcmpl-1", "full", 1, false};
  EXPECT_EQ(CompletionBody(reply, final_header)["sift"]["kept"], final_header["kept"]);
  EXPECT_EQ(FinishChunk(reply, final_header)["sift"]["kept"], final_header["kept"]);
  EXPECT_FALSE(DeltaChunk(reply, "Bl", true).contains("sift"));
  EXPECT_FALSE(UsageChunk(reply, final_header).contains("sift"));
}

TEST(OpenAiResponseTest, CompletionBodyAndChunks) {
  OpenAiReply reply{OpenAiEndpoint::kCompletions, "cmpl-1", "full", 1, true};
  json final_header = Final();
  final_header["finish_reason"] = "stop";
  json body = CompletionBody(reply, final_header);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Blue.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  json chunk = DeltaChunk(reply, "Bl", true);
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], "Bl");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());  // include_usage
}

TEST(OpenAiResponseTest, ChatStreamChunks) {
  OpenAiReply reply{OpenAiEndpoint::kChat, "chatcmpl-1", "full", 1, false};
  json first = DeltaChunk(reply, "Bl", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "Bl"}}));
  EXPECT_FALSE(first.contains("usage"));
  json next = DeltaChunk(reply, "ue", false);
  EXPECT_EQ(next["choices"][0]["delta"], json({{"content", "ue"}}));
  json finish = FinishChunk(reply, Final());
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  json usage = UsageChunk(reply, Final());
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 12);
}

TEST(OpenAiResponseTest, SseFraming) {
  const std::string event = SseData({{"text", "line1\nline2"}, {"bad", std::string("\xff")}});
  EXPECT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_GE(event.size(), 2u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  // One line: the JSON escapes newlines; invalid UTF-8 becomes U+FFFD instead of throwing.
  EXPECT_EQ(event.find('\n'), event.size() - 2);
  const json back = json::parse(event.substr(6));
  EXPECT_EQ(back["text"], "line1\nline2");
  EXPECT_EQ(back["bad"], "\xEF\xBF\xBD");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_EQ(kSseKeepAlive.front(), ':');  // an SSE comment: clients ignore it
}

TEST(OpenAiResponseTest, HttpChunkFraming) {
  EXPECT_EQ(HttpChunk("abc"), "3\r\nabc\r\n");
  EXPECT_EQ(HttpChunk(std::string(26, 'x')), "1a\r\n" + std::string(26, 'x') + "\r\n");  // hex
  EXPECT_EQ(HttpChunk(""), "");  // an empty chunk would end the body
  EXPECT_EQ(HttpLastChunk(), "0\r\n\r\n");
}

// A whole streamed response as the OpenAI port writes it (a chunked 200 header, one HTTP chunk
// per event, several chunks merged into one write, the last chunk), read back by Beast's
// response parser: every event is one `data: ` line with a JSON object, the text of the deltas
// is the streamed text, and `data: [DONE]` is the last event.
TEST(OpenAiResponseTest, StreamParsesAsChunkedSse) {
  namespace http = boost::beast::http;
  OpenAiReply reply{OpenAiEndpoint::kChat, "chatcmpl-9", "full", 1, true};
  http::response<http::empty_body> header{http::status::ok, 11};
  header.set(http::field::content_type, "text/event-stream");
  header.chunked(true);
  http::response_serializer<http::empty_body> serializer(header);
  boost::beast::error_code ec;
  std::string wire;
  serializer.split(true);
  while (!serializer.is_header_done()) {
    serializer.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
      wire += boost::beast::buffers_to_string(buffers);
      serializer.consume(boost::beast::buffer_bytes(buffers));
    });
    ASSERT_FALSE(ec) << ec.message();
  }
  const std::vector<std::string> pieces = {"Bl", "ue\n", "\"sky\" \xF0\x9F\x8C\x8A", "."};
  for (size_t i = 0; i < pieces.size(); ++i) {
    wire += HttpChunk(SseData(DeltaChunk(reply, pieces[i], i == 0)));
  }
  wire += HttpChunk(std::string(kSseKeepAlive));
  json final_header = Final();
  final_header["finish_reason"] = "stop";
  wire += HttpChunk(SseData(FinishChunk(reply, final_header))) +
          HttpChunk(SseData(UsageChunk(reply, final_header))) + HttpChunk(kSseDone) +
          HttpLastChunk();

  http::response_parser<http::string_body> parser;
  parser.eager(true);
  const size_t used = parser.put(boost::asio::buffer(wire), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(used, wire.size());
  const std::string body = parser.get().body();

  std::vector<std::string> events;
  for (size_t start = 0; start < body.size();) {
    const size_t end = body.find("\n\n", start);
    ASSERT_NE(end, std::string::npos) << "an unterminated event: " << body.substr(start);
    events.push_back(body.substr(start, end - start));
    start = end + 2;
  }
  ASSERT_EQ(events.size(), pieces.size() + 4);
  EXPECT_EQ(events.back(), "data: [DONE]");
  std::string text;
  std::vector<json> chunks;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    if (events[i].rfind(':', 0) == 0) continue;  // the keep-alive comment
    ASSERT_EQ(events[i].rfind("data: {", 0), 0u) << events[i];
    EXPECT_EQ(events[i].find('\n'), std::string::npos) << events[i];
    chunks.push_back(json::parse(events[i].substr(6)));
  }
  ASSERT_EQ(chunks.size(), pieces.size() + 2);
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "chatcmpl-9");
    if (!c["choices"].empty()) text += c["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "Blue\n\"sky\" \xF0\x9F\x8C\x8A.");
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks.back()["choices"], json::array());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 2);
}

// Every SIFT/1 status code has an HTTP status and an OpenAI error type; 429 and 503 say when to
// retry except while draining (a retry belongs on another server then).
TEST(OpenAiResponseTest, EveryStatusCodeMaps) {
  struct Case {
    StatusCode code;
    const char* reason;
    int status;
    const char* type;
    bool retry_after;
  };
  const Case cases[] = {
      {StatusCode::kCancelled, "cancelled", 499, "invalid_request_error", false},
      {StatusCode::kInvalidArgument, "bad_field", 400, "invalid_request_error", false},
      {StatusCode::kInvalidArgument, "message_too_large", 413, "invalid_request_error", false},
      {StatusCode::kInvalidArgument, "prompt_too_long", 400, "invalid_request_error", false},
      {StatusCode::kDeadlineExceeded, "deadline", 504, "timeout_error", false},
      {StatusCode::kNotFound, "unknown_pipeline", 404, "invalid_request_error", false},
      {StatusCode::kAlreadyExists, "duplicate_id", 409, "invalid_request_error", false},
      {StatusCode::kResourceExhausted, "queue_full", 429, "rate_limit_error", true},
      {StatusCode::kResourceExhausted, "out_of_memory", 503, "server_error", true},
      {StatusCode::kFailedPrecondition, "pipeline_invalid", 400, "invalid_request_error", false},
      {StatusCode::kUnimplemented, "unimplemented", 501, "server_error", false},
      {StatusCode::kInternal, "internal", 500, "server_error", false},
      {StatusCode::kUnavailable, "worker_lost", 503, "server_error", true},
      {StatusCode::kUnavailable, "shutting_down", 503, "server_error", false},
  };
  for (const Case& c : cases) {
    const std::string what = std::string(StatusCodeName(c.code)) + "/" + c.reason;
    // The same mapping whether the error is made here or arrives as a SIFT/1 error header.
    const OpenAiError made = MakeError(Status(c.code, c.reason, "m"), "");
    const OpenAiError from_header = ErrorFromHeader({{"type", "error"},
                                                     {"code", StatusCodeName(c.code)},
                                                     {"reason", c.reason},
                                                     {"message", "m"}});
    for (const OpenAiError& e : {made, from_header}) {
      EXPECT_EQ(e.status, c.status) << what;
      EXPECT_EQ(e.body["error"]["type"], c.type) << what;
      EXPECT_EQ(e.body["error"]["sift"]["code"], StatusCodeName(c.code)) << what;
      EXPECT_EQ(e.body["error"]["sift"]["reason"], c.reason) << what;
      EXPECT_EQ(e.retry_after_ms >= 0, c.retry_after) << what;
      EXPECT_TRUE(e.body["error"]["message"].is_string()) << what;
    }
  }
  // An error header from a newer peer with a code this build does not know: a 500, not a crash.
  const OpenAiError odd = ErrorFromHeader({{"code", "SOMETHING_NEW"}, {"reason", 7}});
  EXPECT_EQ(odd.status, 500);
  EXPECT_EQ(ErrorFromHeader(json::object()).status, 500);

  struct HttpCase {
    int status;
    const char* type;
  };
  for (const HttpCase& c :
       {HttpCase{400, "invalid_request_error"}, HttpCase{401, "authentication_error"},
        HttpCase{404, "invalid_request_error"}, HttpCase{405, "invalid_request_error"},
        HttpCase{413, "invalid_request_error"}, HttpCase{431, "invalid_request_error"},
        HttpCase{503, "server_error"}}) {
    const OpenAiError e = HttpLevelError(c.status, "code", "message");
    EXPECT_EQ(e.status, c.status);
    EXPECT_EQ(e.body["error"]["type"], c.type) << c.status;
    EXPECT_TRUE(e.body["error"]["param"].is_null());
    EXPECT_EQ(e.retry_after_ms >= 0, c.status == 503) << c.status;  // too many connections
  }
}

// A stream that has begun (status 200 sent) reports an error as an event in the same shape.
TEST(OpenAiResponseTest, ErrorEventInAStream) {
  const OpenAiError e = ErrorFromHeader({{"type", "error"},
                                         {"code", "DEADLINE_EXCEEDED"},
                                         {"reason", "deadline"},
                                         {"message", "the deadline of 300 ms passed"}});
  const std::string event = SseData(e.body);
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  const json back = json::parse(event.substr(6));
  EXPECT_EQ(back["error"]["code"], "deadline");
  EXPECT_EQ(back["error"]["type"], "timeout_error");
  EXPECT_EQ(back["error"]["message"], "the deadline of 300 ms passed");
}

TEST(OpenAiResponseTest, ErrorsAndStatuses) {
  EXPECT_EQ(ErrorStatus(StatusCode::kInvalidArgument, "bad_field"), 400);
  EXPECT_EQ(ErrorStatus(StatusCode::kInvalidArgument, "message_too_large"), 413);
  EXPECT_EQ(ErrorStatus(StatusCode::kNotFound, "unknown_pipeline"), 404);
  EXPECT_EQ(ErrorStatus(StatusCode::kResourceExhausted, "queue_full"), 429);
  EXPECT_EQ(ErrorStatus(StatusCode::kResourceExhausted, "out_of_memory"), 503);
  EXPECT_EQ(ErrorStatus(StatusCode::kUnavailable, "shutting_down"), 503);
  EXPECT_EQ(ErrorStatus(StatusCode::kDeadlineExceeded, "deadline"), 504);
  EXPECT_EQ(ErrorStatus(StatusCode::kInternal, "internal"), 500);

  OpenAiError full = ErrorFromHeader({{"type", "error"},
                                      {"code", "RESOURCE_EXHAUSTED"},
                                      {"reason", "queue_full"},
                                      {"message", "the admission queue is full"},
                                      {"retry_after_ms", 1500},
                                      {"details", {{"queue_size", 64}}}});
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.retry_after_ms, 1500);
  EXPECT_EQ(full.body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(full.body["error"]["code"], "queue_full");
  EXPECT_EQ(full.body["error"]["message"], "the admission queue is full");
  EXPECT_EQ(full.body["error"]["sift"]["details"]["queue_size"], 64);

  OpenAiError unknown = ErrorFromHeader({{"type", "error"},
                                         {"code", "NOT_FOUND"},
                                         {"reason", "unknown_pipeline"},
                                         {"message", "no valid pipeline named 'x'"}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["error"]["code"], "model_not_found");
  EXPECT_EQ(unknown.body["error"]["param"], "model");
  EXPECT_EQ(unknown.body["error"]["type"], "invalid_request_error");

  OpenAiError drain = ErrorFromHeader(
      {{"code", "UNAVAILABLE"}, {"reason", "shutting_down"}, {"message", "draining"}});
  EXPECT_EQ(drain.status, 503);
  EXPECT_EQ(drain.retry_after_ms, -1);  // retry elsewhere, not here

  OpenAiError bad = MakeError(Status(StatusCode::kInvalidArgument, "bad_field", "m"), "top_p");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["error"]["param"], "top_p");
  OpenAiError auth = HttpLevelError(401, "invalid_api_key", "no key");
  EXPECT_EQ(auth.status, 401);
  EXPECT_EQ(auth.body["error"]["type"], "authentication_error");
  EXPECT_EQ(auth.body["error"]["code"], "invalid_api_key");
}

TEST(OpenAiResponseTest, ModelsListValidPipelines) {
  json listing = {
      {"pipelines",
       {{{"name", "full"},
         {"ok", true},
         {"description", "d"},
         {"stages", {{{"name", "prefill"}, {"kind", "prefill"}, {"plugin", "prefill_full"}}}}},
        {{"name", "broken"}, {"ok", false}}}},
      {"model", {{"name", "SmolLM2"}, {"path", "models/x.gguf"}, {"n_ctx", 8192}}}};
  json models = ModelsBody(listing, 42);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "full");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["created"], 42);
  EXPECT_EQ(models["data"][0]["sift"]["model"], "SmolLM2");
  EXPECT_EQ(models["data"][0]["sift"]["stages"][0]["plugin"], "prefill_full");
  EXPECT_FALSE(models["data"][0]["sift"].contains("available"));  // not in this listing
}

TEST(OpenAiResponseTest, ModelsSayWhichPipelinesCannotRunOnTheModel) {
  // A pipeline the catalog lists as unavailable on the loaded model (issue 29: spts without its
  // proxies) stays listed, with the reason and the command that fixes it.
  json listing = {{"pipelines",
                   {{{"name", "full"}, {"ok", true}, {"available", true}},
                    {{"name", "spts"},
                     {"ok", true},
                     {"available", false},
                     {"unavailable", "needs proxies; make them with: sift-spts-calibrate"}}}}};
  json models = ModelsBody(listing, 1);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["sift"]["available"], true);
  EXPECT_FALSE(models["data"][0]["sift"].contains("unavailable"));
  EXPECT_EQ(models["data"][1]["id"], "spts");
  EXPECT_EQ(models["data"][1]["sift"]["available"], false);
  EXPECT_NE(models["data"][1]["sift"]["unavailable"].get<std::string>().find("sift-spts-calibrate"),
            std::string::npos);
}

// ---- API keys ----

TEST(ApiKeysTest, LoadsAndAuthorizes) {
  sift::testing::TempDir dir;
  const std::string path = dir.path() + "/keys";
  {
    std::ofstream out(path);
    out << "# operators\n\n  sk-0123456789abcdef  \nsk-second-key-0000000\n";
  }
  ApiKeys keys;
  ASSERT_TRUE(keys.Load(path).ok());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_TRUE(keys.Authorizes("Bearer sk-0123456789abcdef"));
  EXPECT_TRUE(keys.Authorizes("bearer sk-second-key-0000000"));
  EXPECT_FALSE(keys.Authorizes("Bearer sk-0123456789abcdeX"));
  EXPECT_FALSE(keys.Authorizes("Bearer sk-0123456789abcde"));
  EXPECT_FALSE(keys.Authorizes("Basic sk-0123456789abcdef"));
  EXPECT_FALSE(keys.Authorizes(""));
  EXPECT_FALSE(keys.Authorizes("Bearer "));

  {
    std::ofstream out(path);
    out << "short\n";
  }
  EXPECT_EQ(keys.Load(path).reason(), "api_keys");
  {
    std::ofstream out(path);
    out << "# nothing\n";
  }
  EXPECT_EQ(keys.Load(path).reason(), "api_keys");
  EXPECT_EQ(keys.Load(dir.path() + "/missing").reason(), "api_keys");
}

// ---- siftd options ----

ParseResult ParseArgs(std::vector<std::string> args, DaemonOptions* o, std::string* message) {
  args.insert(args.begin(), "siftd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseOptions(static_cast<int>(argv.size()), argv.data(), o, message);
}

TEST(OpenAiOptionsTest, OffByDefaultAndParsed) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(ParseArgs({}, &o, &message), ParseResult::kRun) << message;
  EXPECT_EQ(o.openai, "");
  ASSERT_EQ(ParseArgs({"--openai", "127.0.0.1:7702", "--openai-api-keys", "/etc/keys",
                       "--openai-max-body-bytes", "4096", "--openai-max-connections", "8",
                       "--openai-timeout-ms", "500"},
                      &o, &message),
            ParseResult::kRun)
      << message;
  EXPECT_EQ(o.openai, "127.0.0.1:7702");
  EXPECT_EQ(o.openai_api_keys, "/etc/keys");
  EXPECT_EQ(o.openai_max_body_bytes, 4096);
  EXPECT_EQ(o.openai_max_connections, 8);
  EXPECT_EQ(o.openai_timeout_ms, 500);
  EXPECT_EQ(ParseArgs({"--openai-timeout-ms", "5"}, &o, &message), ParseResult::kError);
  EXPECT_EQ(ParseArgs({"--openai-max-connections", "0"}, &o, &message), ParseResult::kError);
  EXPECT_EQ(ParseArgs({"--help"}, &o, &message), ParseResult::kExitOk);
  EXPECT_NE(message.find("--openai-api-keys"), std::string::npos);
}

}  // namespace
}  // namespace sift::daemon
