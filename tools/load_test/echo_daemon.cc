// sift-echo-daemon: siftd's front end (ZeroMQ ROUTER, I/O thread, admission queue, workers,
// heartbeats, metrics) with a trivial backend instead of the model, for measuring the daemon's
// own overhead: protocol + dispatch with no model compute.
//
//   sift-echo-daemon --ready-file FILE [--bind tcp://127.0.0.1:*] [--workers 1]
//                    [--queue-size 64] [--openai 127.0.0.1:0]
//
// Its one pipeline, "echo", streams the words of the prompt (or question) back as chunks and
// ends with a final whose stats carry one stage ("echo", the time the backend took) and the
// same timing fields as siftd's. With --openai it also serves siftd's OpenAI-compatible HTTP
// port (daemon/openai_server.h) on the same front end. Runs until SIGTERM/SIGINT (graceful
// drain).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "daemon/front_end.h"
#include "daemon/log.h"
#include "daemon/openai_server.h"
#include "tools/common/command_line.h"

namespace {

using namespace sift::daemon;
using json = nlohmann::json;

class EchoBackend : public Backend {
 public:
  std::shared_ptr<const void> FindPipeline(const std::string& name, uint64_t* gen) override {
    *gen = 1;
    return name == "echo" ? std::make_shared<int>(0) : nullptr;
  }
  json List() override {
    return {{"pipelines", {{{"name", "echo"}, {"ok", true}, {"stages", json::array()}}}},
            {"plugins", json::array()},
            {"model", {{"name", "none (echo)"}}}};
  }
  json Describe() override { return {{"model", "none (echo)"}, {"catalog_generation", 1}}; }
  void Execute(const std::shared_ptr<LiveRequest>& r, ReplySink& sink) override {
    const auto started = Clock::now();
    const GenerateRequest& g = r->request;
    std::istringstream words(g.input == InputKind::kPrompt ? g.prompt : g.question);
    std::string w, text;
    int64_t seq = 0, n = 0;
    std::optional<Clock::time_point> first;
    while (words >> w && n < g.max_tokens) {
      if (r->Cancelled()) {
        sink.SendTerminal(r, Terminal::Error(g.id, r->CancelStatus()));
        return;
      }
      if (!first) first = Clock::now();
      text += w + " ";
      ++n;
      if (g.stream) sink.Send(r, ChunkHeader(g.id, seq++, w + " ", {static_cast<int32_t>(n)}));
    }
    FinalReport report;
    report.text = text;
    report.finish_reason = "stop";
    report.prompt_tokens = report.tokens_before = report.tokens_kept = n;
    report.completion_tokens = n;
    const auto now = Clock::now();
    report.queue_ms = MsBetween(r->received, started);
    report.stages = {{"echo", "echo@0", "decode", MsBetween(started, now)}};
    report.ttft_ms = MsBetween(r->received, first ? *first : now);
    report.e2e_ms = MsBetween(r->received, now);
    report.catalog_generation = 1;
    sink.SendTerminal(r, Terminal::Final(g.id, g.pipeline, report));
  }
};

FrontEnd* g_front_end = nullptr;
volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  FrontEndOptions o;
  std::string bind = "tcp://127.0.0.1:*";
  std::string ready_file;
  OpenAiServerOptions openai_options;
  sift::cli::CommandLine cl("sift-echo-daemon", "sift-echo-daemon [options]",
                            "siftd's front end with a trivial backend (pipeline \"echo\"), for "
                            "measuring the daemon's own\noverhead. Runs until SIGTERM or SIGINT "
                            "(graceful drain).");
  cl.Add()("ready-file", po::value(&ready_file)->value_name("FILE"),
           "write {\"pid\", \"endpoints\", \"openai\"} here once serving")(
      "bind", po::value(&bind)->default_value(bind)->value_name("ENDPOINT"), "ZeroMQ endpoint")(
      "workers", po::value(&o.workers)->default_value(o.workers), "worker threads")(
      "queue-size", po::value(&o.queue_size)->default_value(o.queue_size), "admission queue")(
      "openai", po::value(&openai_options.address)->value_name("[HOST:]PORT"),
      "also serve the OpenAI-compatible HTTP port (docs/openai.md) here");
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  o.endpoints = {bind};
  SetLogLevel(LogLevel::kWarn);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  EchoBackend backend;
  Metrics metrics;
  FrontEnd front_end(o, backend, metrics);
  g_front_end = &front_end;
  sift::Status st = front_end.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "sift-echo-daemon: %s\n", st.ToString().c_str());
    return 1;
  }
  std::unique_ptr<OpenAiServer> openai;
  if (!openai_options.address.empty()) {
    openai = std::make_unique<OpenAiServer>(openai_options, front_end, backend, metrics);
    st = openai->Start();
    if (!st.ok()) {
      std::fprintf(stderr, "sift-echo-daemon: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  if (!ready_file.empty()) {
    std::ofstream(ready_file + ".tmp") << json({{"pid", ::getpid()},
                                                {"endpoints", front_end.endpoints()},
                                                {"openai", openai ? openai->address() : ""}})
                                              .dump()
                                       << "\n";
    std::rename((ready_file + ".tmp").c_str(), ready_file.c_str());
  }
  while (!g_signal) ::usleep(50000);
  front_end.BeginDrain();
  front_end.Wait();
  if (openai) openai->Stop(2000);
  return 0;
}
