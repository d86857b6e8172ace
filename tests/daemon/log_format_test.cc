// siftd's log lines for people and for machines (issue 27): text when stderr is a terminal, JSON
// lines otherwise (--log-format auto), either one on request; the same events and fields. The
// real siftd is started on a pseudo-terminal and on a file.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

#define REQUIRE_MODEL()                                               \
  if (sift::testing::ModelPath().empty()) {                           \
    GTEST_SKIP() << "SIFT_MODEL is not set (tools/setup.sh sets it)"; \
  }

std::vector<std::string> SiftdArgs(const sift::testing::TempDir& dir,
                                   const std::vector<std::string>& extra) {
  std::vector<std::string> args = {std::string(SIFT_BINARY_DIR) + "/bin/siftd",
                                   "--model",
                                   sift::testing::ModelPath(),
                                   "--pipelines",
                                   std::string(SIFT_SOURCE_DIR) + "/pipelines",
                                   "--plugins",
                                   std::string(SIFT_BINARY_DIR) + "/plugins",
                                   "--staging-dir",
                                   dir.path(),
                                   "--bind",
                                   "tcp://127.0.0.1:*",
                                   "--http",
                                   "127.0.0.1:0",
                                   "--threads",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Starts siftd with stdout and stderr on a pseudo-terminal, reads what it writes until a line
// has `until` (then sends SIGTERM) and on until it exits. Returns the lines, '\r' removed.
std::vector<std::string> RunOnATerminal(const std::vector<std::string>& args,
                                        const std::string& until) {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) {
    ADD_FAILURE() << "openpty failed";
    return {};
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(master);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    ::close(slave);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(slave);
  std::string out;
  bool stopping = false;
  const auto end = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < end) {
    pollfd p = {master, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof(buf));
      if (n <= 0) break;  // EIO: the child has exited and closed the terminal
      out.append(buf, static_cast<size_t>(n));
    }
    if (!stopping && out.find(until) != std::string::npos) {
      ::kill(pid, SIGTERM);
      stopping = true;
    }
  }
  if (!stopping) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  EXPECT_TRUE(stopping) << "never saw " << until << " in:\n" << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// `2026-11-27T16:40:00.123Z INFO  event key=value ...`
const std::regex kTextLine(
    R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARN |ERROR) [a-z_]+( [a-z_]+=.*)?)");

void ExpectTextLines(const std::vector<std::string>& lines) {
  ASSERT_FALSE(lines.empty());
  bool ready = false, stopped = false;
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_match(line, kTextLine)) << line;
    ready |= line.find(" INFO  ready ") != std::string::npos &&
             line.find(" pipelines_ok=") != std::string::npos &&
             line.find(" endpoints=[\"tcp://127.0.0.1:") != std::string::npos;
    stopped |= line.find(" INFO  stopped") != std::string::npos;
  }
  EXPECT_TRUE(ready);
  EXPECT_TRUE(stopped);
}

TEST(LogFormatTest, TextOnATerminalByDefault) {
  REQUIRE_MODEL();
  sift::testing::TempDir dir;
  ExpectTextLines(RunOnATerminal(SiftdArgs(dir, {}), " ready "));
}

TEST(LogFormatTest, JsonOnATerminalWhenAsked) {
  REQUIRE_MODEL();
  sift::testing::TempDir dir;
  const std::vector<std::string> lines =
      RunOnATerminal(SiftdArgs(dir, {"--log-format", "json"}), "\"event\":\"ready\"");
  ASSERT_FALSE(lines.empty());
  for (const std::string& line : lines) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("event")) << line;
  }
}

// Not a terminal: JSON lines by default (every other daemon test reads them), text when asked.
TEST(LogFormatTest, TextIntoAFileWhenAsked) {
  REQUIRE_MODEL();
  sift::testing::SiftdProcess d;
  ASSERT_EQ(d.Start({"--log-format", "text"}), "");
  EXPECT_EQ(d.Stop(), 0);
  std::vector<std::string> lines;
  std::istringstream in(d.log());
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  ExpectTextLines(lines);
}

TEST(LogFormatTest, UnknownFormatIsABadOption) {
  const std::string cmd = std::string(SIFT_BINARY_DIR) + "/bin/siftd --log-format xml 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find("--log-format: expected text, json or auto"), std::string::npos) << out;
}

}  // namespace
