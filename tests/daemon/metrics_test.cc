// Unit tests of the Prometheus registry (daemon/metrics.h) and the log line format.
#include "daemon/metrics.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/log.h"
#include "daemon/peer_log_limiter.h"
#include "daemon/public_listing.h"

namespace sift::daemon {
namespace {

TEST(MetricsTest, RendersCountersGaugesHistograms) {
  Metrics m;
  m.DeclareCounter("sift_requests_total", "Requests.");
  m.DeclareGauge("sift_queue_depth", "Depth.", [] { return 3.0; });
  m.DeclareHistogram("sift_e2e_seconds", "E2E.", {0.1, 1});
  m.Add("sift_requests_total", {{"pipeline", "full"}, {"outcome", "ok"}});
  m.Add("sift_requests_total", {{"pipeline", "full"}, {"outcome", "ok"}}, 2);
  m.Add("sift_requests_total", {{"pipeline", "a\"b"}, {"outcome", "ok"}});
  m.Observe("sift_e2e_seconds", {{"pipeline", "full"}}, 0.05);
  m.Observe("sift_e2e_seconds", {{"pipeline", "full"}}, 0.5);
  m.Observe("sift_e2e_seconds", {{"pipeline", "full"}}, 5);
  const std::string text = m.Render();
  EXPECT_NE(text.find("# TYPE sift_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("sift_requests_total{pipeline=\"full\",outcome=\"ok\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("pipeline=\"a\\\"b\""), std::string::npos);
  EXPECT_NE(text.find("sift_queue_depth 3\n"), std::string::npos);
  EXPECT_NE(text.find("sift_e2e_seconds_bucket{pipeline=\"full\",le=\"0.1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("sift_e2e_seconds_bucket{pipeline=\"full\",le=\"1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("sift_e2e_seconds_bucket{pipeline=\"full\",le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("sift_e2e_seconds_count{pipeline=\"full\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("sift_e2e_seconds_sum{pipeline=\"full\"} 5.55"), std::string::npos);
  EXPECT_EQ(m.Value("sift_requests_total", {{"pipeline", "full"}, {"outcome", "ok"}}), 3);
  EXPECT_THROW(m.Add("nope", {}), std::logic_error);
}

TEST(LogTest, WritesOneJsonObjectPerLine) {
  std::vector<std::string> lines;
  SetLogSink([&](const std::string& line) { lines.push_back(line); });
  LogInfo("request_done", {{"req", "r1"}, {"ms", 1.5}});
  LogDebug("hidden");  // below the default level
  SetLogSink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["event"], "request_done");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["req"], "r1");
  EXPECT_TRUE(j["ts"].get<std::string>().back() == 'Z');
}

TEST(LogTest, TextLinesCarryTheSameFields) {
  const nlohmann::json fields = {
      {"req", "r1"}, {"ms", 1.5},          {"pipeline", "full"}, {"message", "no such pipeline"},
      {"empty", ""}, {"quote", "a\"b"},    {"eq", "k=v"},        {"list", {"tcp://a", "tcp://b"}},
      {"ok", true},  {"nothing", nullptr}, {"event", "spoof"}};
  const std::string ts = "2026-11-27T16:40:00.123Z";
  EXPECT_EQ(FormatLogLine(LogFormat::kText, ts, LogLevel::kWarn, "request_done", fields),
            "2026-11-27T16:40:00.123Z WARN  request_done empty=\"\" eq=\"k=v\" "
            "list=[\"tcp://a\",\"tcp://b\"] message=\"no such pipeline\" ms=1.5 nothing=null "
            "ok=true pipeline=full quote=\"a\\\"b\" req=r1");
  // JSON: ts, level and event first, then the same fields; no field replaces those three.
  const std::string line =
      FormatLogLine(LogFormat::kJson, ts, LogLevel::kWarn, "request_done", fields);
  EXPECT_EQ(
      line.rfind(R"({"ts":"2026-11-27T16:40:00.123Z","level":"warn","event":"request_done",)", 0),
      0u)
      << line;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "request_done");
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["ts"], ts);
  EXPECT_EQ(j.size(), fields.size() - 1 + 3);
  // Control characters never reach the terminal raw.
  EXPECT_EQ(FormatLogLine(LogFormat::kText, ts, LogLevel::kError, "e", {{"k", "a\nb\x1b"}}),
            "2026-11-27T16:40:00.123Z ERROR e k=\"a\\nb\\u001b\"");
}

TEST(LogTest, FormatNames) {
  LogFormat f = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_TRUE(ParseLogFormat("auto", &f));  // ctest's stderr is not a terminal
  EXPECT_EQ(f, ::isatty(STDERR_FILENO) == 1 ? LogFormat::kText : LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml", &f));
}

// Lines an unauthenticated peer causes: the first per peer is written, the rest within the
// interval are counted; another peer has its own allowance; the table stays bounded.
TEST(PeerLogLimiterTest, OneLinePerPeerPerInterval) {
  Metrics m;
  PeerLogLimiter limiter(&m, /*interval_ms=*/60000, /*max_peers=*/4);
  std::vector<std::string> lines;
  SetLogSink([&](const std::string& line) { lines.push_back(line); });
  int written = 0;
  for (int i = 0; i < 200; ++i) {
    written += limiter.Log(LogLevel::kWarn, "auth_denied", "10.0.0.1", {{"key", "k"}});
  }
  written += limiter.Log(LogLevel::kWarn, "auth_denied", "10.0.0.2", {});
  for (int i = 0; i < 100; ++i) {  // many addresses: bounded by the shared "*" entry
    written += limiter.Log(LogLevel::kWarn, "auth_denied", "10.1.0." + std::to_string(i), {});
  }
  SetLogSink(nullptr);
  EXPECT_EQ(written, 2 + 2 + 1);  // .1, .2, two more fresh addresses, then "*" once
  EXPECT_EQ(lines.size(), 5u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["event"], "auth_denied");
  EXPECT_EQ(first["peer"], "10.0.0.1");
  EXPECT_EQ(first["key"], "k");
  EXPECT_NE(m.Render().find("sift_log_suppressed_total{event=\"auth_denied\"} 296"),
            std::string::npos)
      << m.Render();
}

TEST(PeerLogLimiterTest, TheNextLineAfterTheIntervalSaysHowManyWereWithheld) {
  PeerLogLimiter limiter(nullptr, /*interval_ms=*/1);
  std::vector<std::string> lines;
  SetLogSink([&](const std::string& line) { lines.push_back(line); });
  limiter.Log(LogLevel::kWarn, "e", "p", {});
  int suppressed = 0;
  while (limiter.Log(LogLevel::kWarn, "e", "p", {}) == false) ++suppressed;
  SetLogSink(nullptr);
  ASSERT_EQ(lines.size(), 2u);
  const auto second = nlohmann::json::parse(lines[1]);
  if (suppressed > 0) {
    EXPECT_EQ(second["suppressed"], suppressed);
  } else {
    EXPECT_FALSE(second.contains("suppressed"));
  }
}

TEST(PublicListingTest, NamesNotPaths) {
  nlohmann::json listing = {
      {"pipelines",
       {{{"name", "full"}, {"file", "/srv/sift/pipelines/full.toml"}, {"error", ""}},
        {{"name", "bad"},
         {"file", "/srv/sift/pipelines/bad.toml"},
         {"error", "/srv/sift/pipelines/bad.toml: line 3: plugin 'x' (/srv/p/x.so) failed"}}}},
      {"plugins", {{{"name", "x"}, {"file", "/srv/p/x.so"}, {"error", "a/b c"}}}},
      {"model", {{"name", "M"}, {"path", "/models/m.gguf"}}}};
  const nlohmann::json out = PublicListing(listing);
  EXPECT_EQ(out["pipelines"][0]["file"], "full.toml");
  EXPECT_EQ(out["pipelines"][1]["error"], "bad.toml: line 3: plugin 'x' (x.so) failed");
  EXPECT_EQ(out["plugins"][0]["file"], "x.so");
  EXPECT_EQ(out["plugins"][0]["error"], "a/b c");  // not absolute: left alone
  EXPECT_EQ(out["model"]["path"], "m.gguf");
  EXPECT_EQ(out["model"]["name"], "M");
  EXPECT_EQ(out.dump().find("/srv"), std::string::npos);
}

}  // namespace
}  // namespace sift::daemon
