// Unit tests of the Prometheus registry (daemon/metrics.h) and the log line format.
#include "daemon/metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/log.h"

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

}  // namespace
}  // namespace sift::daemon
