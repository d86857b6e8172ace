// siftd option parsing: defaults, flags, config file (flags win, repeatable options combine),
// validation errors (daemon/options.h).
#include "daemon/options.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace sift::daemon {
namespace {

ParseResult Parse(std::vector<std::string> args, DaemonOptions* o, std::string* message) {
  args.insert(args.begin(), "siftd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseOptions(static_cast<int>(argv.size()), argv.data(), o, message);
}

TEST(OptionsTest, DefaultsServeFromTheRepositoryRoot) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(Parse({}, &o, &message), ParseResult::kRun) << message;
  EXPECT_EQ(o.model, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(o.pipelines_dir, "pipelines");
  EXPECT_EQ(o.plugins_dir, "build/plugins");
  EXPECT_EQ(o.bind, std::vector<std::string>({"tcp://127.0.0.1:7700"}));
  EXPECT_EQ(o.http, "127.0.0.1:7701");
  EXPECT_EQ(o.workers, 64);
  EXPECT_EQ(o.queue_size, 64);
  // Batching (docs/operations.md#batching).
  EXPECT_EQ(o.max_batch, 64);
  EXPECT_EQ(o.prefill_chunk, 512);
  EXPECT_EQ(o.decode_interval_ms, 200);
  EXPECT_EQ(o.kv_budget, "50%");
  EXPECT_EQ(o.io_nice, 0);
  // The limits one peer meets (docs/operations.md section 6).
  EXPECT_EQ(o.max_tokens_limit, 4096);
  EXPECT_FALSE(o.allow_ignore_eos);
  EXPECT_EQ(o.openai_max_connections_per_peer, 16);
  EXPECT_EQ(o.openai_idle_timeout_ms, 5000);
  // The engine: activations chosen by the CPU unless asked (docs/engine.md#int8-activations).
  EXPECT_EQ(o.weights, "native");
  EXPECT_EQ(o.activations, "auto");
  DaemonOptions int8;
  ASSERT_EQ(Parse({"--int8-activations"}, &int8, &message), ParseResult::kRun) << message;
  EXPECT_EQ(int8.activations, "int8");  // the older spelling
  DaemonOptions fp32;
  ASSERT_EQ(Parse({"--activations", "fp32"}, &fp32, &message), ParseResult::kRun) << message;
  EXPECT_EQ(fp32.activations, "fp32");
  DaemonOptions bad;
  EXPECT_EQ(Parse({"--activations", "int4"}, &bad, &message), ParseResult::kError);
  EXPECT_NE(message.find("--activations must be auto, int8 or fp32"), std::string::npos) << message;
  EXPECT_EQ(Parse({"--activations", "fp32", "--int8-activations"}, &bad, &message),
            ParseResult::kError);
  EXPECT_NE(message.find("contradicts"), std::string::npos) << message;
}

// The prefill chunk follows the device unless given: 512 on the CPU, the whole prompt on CUDA.
TEST(OptionsTest, PrefillChunkDefaultsByDevice) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(Parse({"--device", "cuda"}, &o, &message), ParseResult::kRun) << message;
  EXPECT_EQ(o.prefill_chunk, 0);
  DaemonOptions given;
  ASSERT_EQ(Parse({"--device", "cuda:0", "--prefill-chunk", "256"}, &given, &message),
            ParseResult::kRun)
      << message;
  EXPECT_EQ(given.prefill_chunk, 256);
  DaemonOptions cpu;
  ASSERT_EQ(Parse({"--prefill-chunk", "-1"}, &cpu, &message), ParseResult::kRun) << message;
  EXPECT_EQ(cpu.prefill_chunk, 512);
}

TEST(OptionsTest, PrefixCacheIsOnByDefaultAndItsMinimumIsChecked) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(Parse({}, &o, &message), ParseResult::kRun) << message;
  EXPECT_TRUE(o.prefix_cache);
  EXPECT_EQ(o.prefix_cache_min_tokens, 64);
  DaemonOptions off;
  ASSERT_EQ(Parse({"--prefix-cache", "off", "--prefix-cache-min-tokens", "256"}, &off, &message),
            ParseResult::kRun)
      << message;
  EXPECT_FALSE(off.prefix_cache);
  EXPECT_EQ(off.prefix_cache_min_tokens, 256);
  DaemonOptions bad;
  EXPECT_EQ(Parse({"--prefix-cache-min-tokens", "0"}, &bad, &message), ParseResult::kError);
  EXPECT_NE(message.find("--prefix-cache-min-tokens"), std::string::npos) << message;
}

TEST(OptionsTest, BatchingOptionsAreRangeChecked) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(Parse({"--max-batch", "0", "--prefill-chunk", "128", "--kv-budget", "2G", "--io-nice",
                   "0", "--decode-interval-ms", "50", "--decode-pool", "off"},
                  &o, &message),
            ParseResult::kRun)
      << message;
  EXPECT_EQ(o.max_batch, 0);
  EXPECT_EQ(o.prefill_chunk, 128);
  EXPECT_EQ(o.kv_budget, "2G");
  EXPECT_EQ(o.decode_interval_ms, 50);
  EXPECT_EQ(o.decode_pool, "off");
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--max-batch", "-1"},
                                              {"--prefill-chunk", "-5"},
                                              {"--decode-interval-ms", "-1"},
                                              {"--decode-interval-ms", "60001"},
                                              {"--kv-budget", "lots"},
                                              {"--kv-budget", "0"},
                                              {"--io-nice", "20"},
                                              {"--decode-pool", "always"}}) {
    DaemonOptions b;
    EXPECT_EQ(Parse(bad, &b, &message), ParseResult::kError) << bad[0] << " " << bad[1];
    EXPECT_NE(message.find(bad[0]), std::string::npos) << message;
  }
}

TEST(OptionsTest, PeerLimits) {
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(Parse({"--max-tokens-limit", "64", "--allow-ignore-eos", "true",
                   "--openai-max-connections-per-peer", "4", "--openai-idle-timeout-ms", "250"},
                  &o, &message),
            ParseResult::kRun)
      << message;
  EXPECT_EQ(o.max_tokens_limit, 64);
  EXPECT_TRUE(o.allow_ignore_eos);
  EXPECT_EQ(o.openai_max_connections_per_peer, 4);
  EXPECT_EQ(o.openai_idle_timeout_ms, 250);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--max-tokens-limit", "0"},
        std::vector<std::string>{"--max-tokens-limit", "2000000"},
        std::vector<std::string>{"--openai-max-connections-per-peer", "0"},
        std::vector<std::string>{"--openai-idle-timeout-ms", "10"}}) {
    DaemonOptions d;
    EXPECT_EQ(Parse(bad, &d, &message), ParseResult::kError) << bad[0];
  }
}

TEST(OptionsTest, ConfigFileAndFlags) {
  const std::string path = ::testing::TempDir() + "/siftd-test.conf";
  std::ofstream(path) << "# comment\nworkers = 3\nqueue-size = 9\nbind = ipc:///tmp/a.sock\n"
                         "log-level = debug\n";
  DaemonOptions o;
  std::string message;
  ASSERT_EQ(
      Parse({"--config", path, "--workers", "2", "--bind", "tcp://127.0.0.1:9"}, &o, &message),
      ParseResult::kRun)
      << message;
  EXPECT_EQ(o.workers, 2);     // the flag wins
  EXPECT_EQ(o.queue_size, 9);  // from the file
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.bind, std::vector<std::string>({"tcp://127.0.0.1:9", "ipc:///tmp/a.sock"}));
  std::remove(path.c_str());
}

TEST(OptionsTest, ErrorsAndHelp) {
  DaemonOptions o;
  std::string message;
  EXPECT_EQ(Parse({"--workers", "0"}, &o, &message), ParseResult::kError);
  EXPECT_NE(message.find("--workers"), std::string::npos);
  EXPECT_EQ(Parse({"--no-such-flag"}, &o, &message), ParseResult::kError);
  EXPECT_EQ(Parse({"--queue-size", "many"}, &o, &message), ParseResult::kError);
  EXPECT_EQ(Parse({"--config", "/nonexistent/siftd.conf"}, &o, &message), ParseResult::kError);
  EXPECT_NE(message.find("/nonexistent/siftd.conf"), std::string::npos);
  EXPECT_EQ(Parse({"--help"}, &o, &message), ParseResult::kExitOk);
  EXPECT_NE(message.find("--queue-size"), std::string::npos);
}

}  // namespace
}  // namespace sift::daemon
