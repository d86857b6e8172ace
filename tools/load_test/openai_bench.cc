// sift-openai-bench: the per-request cost of siftd's OpenAI-compatible HTTP path against its
// SIFT/1 ZeroMQ path, on the same daemon, pipeline, prompt and request count.
//
//   sift-openai-bench --ready-file READY.json [--pipeline full] [--prompt TEXT]
//                     [--max-tokens 2] [--requests 200] [--warmup 10] [--stream]
//                     [--out FILE --label TITLE]
//
// One client of each kind, one request in flight at a time, alternating (ZeroMQ then HTTP,
// then HTTP then ZeroMQ, ...) so that drift in the machine's load hits both alike. HTTP: one
// keep-alive connection, POST /v1/completions (raw prompt, temperature 0), whole responses or,
// with --stream, server-sent events with include_usage; ZeroMQ: a DEALER sending the same
// generate (prompt, max_tokens, greedy, stream on or off to match). Per request it records
// the client round trip (send to the last byte of the answer) and the daemon's own e2e_ms
// (from the final's stats / usage.sift), so that round trip - e2e is what the transport and the
// front end add outside the daemon's request clock. Prints a JSON summary; --out appends a
// Markdown section (tools/load_test/run.sh). Loopback only. Exit status 0 when every request
// succeeded and the two paths returned the same text.
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client.h"
#include "tools/common/command_line.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace po = boost::program_options;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string ready_file, pipeline = "full", prompt = "Name a colour.", out, label;
  int max_tokens = 2, requests = 200, warmup = 10;
  bool stream = false;
};

struct Sample {
  double client_ms = 0;  // send -> whole answer received
  double daemon_ms = 0;  // the daemon's e2e_ms
  std::string text;
};

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

class HttpPath {
 public:
  HttpPath(const std::string& address, const Args& a) : args_(a), socket_(io_) {
    const size_t colon = address.rfind(':');
    host_ = address.substr(0, colon);
    tcp::resolver resolver(io_);
    asio::connect(socket_, resolver.resolve(host_, address.substr(colon + 1)));
    socket_.set_option(tcp::no_delay(true));
  }

  Sample Run() {
    json body = {{"model", args_.pipeline},
                 {"prompt", args_.prompt},
                 {"max_tokens", args_.max_tokens},
                 {"temperature", 0},
                 {"stream", args_.stream}};
    if (args_.stream) body["stream_options"] = {{"include_usage", true}};
    http::request<http::string_body> req(http::verb::post, "/v1/completions", 11);
    req.set(http::field::host, host_);
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
    req.prepare_payload();
    Sample s;
    const auto t0 = Clock::now();
    http::write(socket_, req);
    http::response<http::string_body> res;
    http::read(socket_, buffer_, res);
    s.client_ms = Ms(t0, Clock::now());
    if (res.result_int() != 200) {
      throw std::runtime_error("HTTP " + std::to_string(res.result_int()) + ": " + res.body());
    }
    json usage;
    if (args_.stream) {
      std::istringstream events(res.body());
      std::string line;
      while (std::getline(events, line)) {
        if (line.rfind("data: {", 0) != 0) continue;
        const json chunk = json::parse(line.substr(6));
        if (!chunk["choices"].empty()) s.text += chunk["choices"][0].value("text", "");
        if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
      }
    } else {
      const json whole = json::parse(res.body());
      s.text = whole["choices"][0]["text"];
      usage = whole["usage"];
    }
    s.daemon_ms = usage["sift"]["e2e_ms"];
    return s;
  }

 private:
  const Args& args_;
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::string host_;
};

class ZmqPath {
 public:
  ZmqPath(zmq::context_t& ctx, const std::string& endpoint, const Args& a)
      : args_(a), client_(ctx, Options(endpoint)) {}

  Sample Run() {
    const std::string id = "b" + std::to_string(next_++);
    json req = {{"type", "generate"},
                {"id", id},
                {"pipeline", args_.pipeline},
                {"prompt", args_.prompt},
                {"max_tokens", args_.max_tokens},
                {"stream", args_.stream}};
    Sample s;
    const auto t0 = Clock::now();
    client_.Send(req);
    for (;;) {
      json h;
      if (!client_.Recv(&h, 60000)) throw std::runtime_error("ZeroMQ: no answer in 60 s");
      if (h.value("id", "") != id) continue;
      const std::string type = h.value("type", "");
      if (type == "error") throw std::runtime_error("ZeroMQ: " + h.dump());
      if (type != "final") continue;
      s.client_ms = Ms(t0, Clock::now());
      s.text = h["text"];
      s.daemon_ms = h["stats"]["e2e_ms"];
      return s;
    }
  }

 private:
  static sift::client::ClientOptions Options(const std::string& endpoint) {
    sift::client::ClientOptions o;
    o.endpoint = endpoint;
    return o;
  }
  const Args& args_;
  sift::client::SiftClient client_;
  int64_t next_ = 0;
};

struct Series {
  std::vector<double> client, daemon, outside;
  void Add(const Sample& s) {
    client.push_back(s.client_ms);
    daemon.push_back(s.daemon_ms);
    outside.push_back(s.client_ms - s.daemon_ms);
  }
};

json Stats(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 50)}, {"p99", Percentile(v, 99)}, {"n", v.size()}};
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

// kContinue, or the exit status (help or a usage error, printed).
int ParseArgs(int argc, char** argv, Args* a) {
  sift::cli::CommandLine cl("sift-openai-bench",
                            "sift-openai-bench --ready-file READY.json [options]",
                            "Per-request cost of siftd's OpenAI HTTP path vs its ZeroMQ path "
                            "(tools/load_test/openai_overhead.sh).");
  cl.Add()("ready-file", po::value(&a->ready_file)->required(),
           "siftd's --ready-file (needs \"endpoints\" and \"openai\")")(
      "pipeline", po::value(&a->pipeline)->default_value(a->pipeline), "pipeline (model)")(
      "prompt", po::value(&a->prompt)->default_value(a->prompt), "raw prompt")(
      "max-tokens", po::value(&a->max_tokens)->default_value(a->max_tokens), "tokens to generate")(
      "requests", po::value(&a->requests)->default_value(a->requests),
      "measured requests per path")("warmup", po::value(&a->warmup)->default_value(a->warmup),
                                    "unmeasured requests per path")(
      "stream", po::bool_switch(&a->stream), "stream (SSE / chunks) instead of whole answers")(
      "out", po::value(&a->out), "append a Markdown section to this file")(
      "label", po::value(&a->label), "section title");
  po::variables_map vm;
  return cl.Parse(argc, argv, &vm);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int status = ParseArgs(argc, argv, &a); status != sift::cli::kContinue) return status;
  try {
    std::ifstream in(a.ready_file);
    const json ready = json::parse(in);
    const std::string openai = ready.value("openai", "");
    if (openai.empty()) throw std::runtime_error("the daemon has no OpenAI port (--openai)");
    zmq::context_t ctx(1);
    ZmqPath zmq_path(ctx, ready["endpoints"][0], a);
    HttpPath http_path(openai, a);
    for (int i = 0; i < a.warmup; ++i) {
      zmq_path.Run();
      http_path.Run();
    }
    Series z, h;
    int mismatches = 0;
    for (int i = 0; i < a.requests; ++i) {
      Sample zs, hs;
      if (i % 2 == 0) {
        zs = zmq_path.Run();
        hs = http_path.Run();
      } else {
        hs = http_path.Run();
        zs = zmq_path.Run();
      }
      if (zs.text != hs.text) ++mismatches;
      z.Add(zs);
      h.Add(hs);
    }
    const json summary = {
        {"pipeline", a.pipeline},
        {"prompt", a.prompt},
        {"max_tokens", a.max_tokens},
        {"stream", a.stream},
        {"requests_per_path", a.requests},
        {"text_mismatches", mismatches},
        {"zeromq",
         {{"client_ms", Stats(z.client)},
          {"daemon_e2e_ms", Stats(z.daemon)},
          {"outside_daemon_ms", Stats(z.outside)}}},
        {"http",
         {{"client_ms", Stats(h.client)},
          {"daemon_e2e_ms", Stats(h.daemon)},
          {"outside_daemon_ms", Stats(h.outside)}}},
        {"http_minus_zeromq_ms",
         {{"client_p50", Percentile(h.client, 50) - Percentile(z.client, 50)},
          {"client_p99", Percentile(h.client, 99) - Percentile(z.client, 99)},
          {"outside_daemon_p50", Percentile(h.outside, 50) - Percentile(z.outside, 50)},
          {"outside_daemon_p99", Percentile(h.outside, 99) - Percentile(z.outside, 99)}}}};
    std::cout << summary.dump(2) << "\n";
    if (!a.out.empty()) {
      std::ofstream md(a.out, std::ios::app);
      auto row = [&](const char* what, const std::vector<double>& zv,
                     const std::vector<double>& hv) {
        md << "| " << what << " | " << Fmt(Percentile(zv, 50)) << " / " << Fmt(Percentile(zv, 99))
           << " | " << Fmt(Percentile(hv, 50)) << " / " << Fmt(Percentile(hv, 99)) << " | "
           << Fmt(Percentile(hv, 50) - Percentile(zv, 50)) << " / "
           << Fmt(Percentile(hv, 99) - Percentile(zv, 99)) << " |\n";
      };
      md << "### " << (a.label.empty() ? "Run" : a.label) << "\n\n"
         << a.requests << " requests per path (after " << a.warmup
         << " unmeasured), one at a time, alternating; pipeline `" << a.pipeline
         << "`, raw prompt \"" << a.prompt << "\", max_tokens " << a.max_tokens << ", greedy, "
         << (a.stream ? "streamed (SSE with include_usage / SIFT/1 chunks)"
                      : "whole answers (stream off on both)")
         << ". Texts equal on both paths: " << (mismatches == 0 ? "yes" : "NO") << ".\n\n"
         << "| ms, p50 / p99 | ZeroMQ (SIFT/1) | HTTP (OpenAI) | HTTP - ZeroMQ |\n"
         << "|---|---|---|---|\n";
      row("client round trip", z.client, h.client);
      row("daemon e2e (its own clock)", z.daemon, h.daemon);
      row("round trip - daemon e2e", z.outside, h.outside);
      md << "\n";
    }
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "sift-openai-bench: " << e.what() << "\n";
    return 1;
  }
}
