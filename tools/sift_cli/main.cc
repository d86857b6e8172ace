// sift: command-line client of siftd (protocol SIFT/1 over ZeroMQ; docs/protocol.md).
//
//   sift generate --context-file FILE --question TEXT [--pipeline full] [options]
//   sift generate --prompt TEXT | --prompt-file FILE | --message ROLE:TEXT ... [options]
//   sift list [--json]
//   sift ping [--count N]
//
// generate streams the answer to stdout as it is produced and prints a one-line summary
// (tokens kept, TTFT, e2e) to stderr; --json prints the final message instead. Ctrl-C sends a
// cancel and waits briefly for the daemon's answer. Exit status: 0 ok, 1 error reply, 2 usage,
// 3 no answer from the daemon, 130 interrupted.
#include <unistd.h>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client.h"

namespace {

namespace po = boost::program_options;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_interrupted = 0;
void OnSigint(int) { g_interrupted = 1; }

constexpr int kFirstReplyTimeoutMs = 5000;
constexpr int kIdleTimeoutMs = 30000;  // the daemon heartbeats every second while busy

struct Common {
  std::string endpoint = "tcp://127.0.0.1:7700";
  std::string server_key, secret_key;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream os;
  os << in.rdbuf();
  *out = os.str();
  return true;
}

sift::client::ClientOptions ClientOptionsFrom(const Common& c) {
  sift::client::ClientOptions o;
  o.endpoint = c.endpoint;
  if (!c.server_key.empty() || !c.secret_key.empty()) {
    o.server_public_key = sift::client::ReadKey(c.server_key);
    o.secret_key = sift::client::ReadKey(c.secret_key);
    o.public_key = sift::client::PublicKeyOf(o.secret_key);
  }
  return o;
}

// Parses "value" as JSON when it is JSON (numbers, true, [..]); otherwise as a string.
json ParamValue(const std::string& text) {
  json v = json::parse(text, nullptr, false);
  return v.is_discarded() ? json(text) : v;
}

void PrintError(const json& h) {
  std::fprintf(stderr, "error %s/%s: %s\n", h.value("code", "?").c_str(),
               h.value("reason", "?").c_str(), h.value("message", "").c_str());
  if (h.contains("details")) std::fprintf(stderr, "details: %s\n", h["details"].dump().c_str());
  if (h.value("retryable", false)) {
    std::fprintf(stderr, "(retryable; retry after %lld ms)\n",
                 static_cast<long long>(h.value("retry_after_ms", 0)));
  }
}

void PrintSummary(const json& f) {
  const json& s = f["stats"];
  const json& u = f["usage"];
  std::fprintf(stderr,
               "[%s] finish=%s prompt=%lld kept=%lld generated=%lld | queue %.1f ms, "
               "prefill %.1f ms, ttft %.1f ms, decode %.1f ms (%.1f tok/s), e2e %.1f ms\n",
               f.value("pipeline", "").c_str(), f.value("finish_reason", "").c_str(),
               static_cast<long long>(u.value("prompt_tokens", 0)),
               static_cast<long long>(s.value("tokens_kept", 0)),
               static_cast<long long>(u.value("completion_tokens", 0)), s.value("queue_ms", 0.0),
               s.value("prefill_ms", 0.0), s.value("ttft_ms", 0.0), s.value("decode_ms", 0.0),
               s.value("decode_tok_s", 0.0), s.value("e2e_ms", 0.0));
  if (s.contains("stages")) {
    std::string line;
    for (const json& st : s["stages"]) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s%s (%s) %.1f ms", line.empty() ? "" : ", ",
                    st.value("stage", "").c_str(), st.value("plugin", "").c_str(),
                    st.value("ms", 0.0));
      line += buf;
    }
    if (!line.empty()) std::fprintf(stderr, "stages: %s\n", line.c_str());
  }
}

int Generate(const Common& common, const std::vector<std::string>& args) {
  std::string context_file, question, prompt, prompt_file, pipeline = "full", id, system;
  std::vector<std::string> messages, stops, params;
  int64_t max_tokens = 128, top_k = 0, deadline_ms = 0, seed = 0;
  double temperature = 0, top_p = 1;
  bool no_stream = false, as_json = false;
  po::options_description d("generate options");
  d.add_options()("help,h", "this help")("context-file", po::value(&context_file),
                                         "context text file (with --question)")(
      "question", po::value(&question), "the question about the context")(
      "system", po::value(&system), "system prompt (with --question)")(
      "prompt", po::value(&prompt), "raw prompt text (no chat template)")(
      "prompt-file", po::value(&prompt_file), "raw prompt from a file")(
      "message", po::value(&messages)->composing(), "chat message ROLE:TEXT (repeatable)")(
      "pipeline,p", po::value(&pipeline)->default_value(pipeline), "pipeline name")(
      "max-tokens,n", po::value(&max_tokens)->default_value(max_tokens), "tokens to generate")(
      "temperature", po::value(&temperature)->default_value(temperature), "0 = greedy")(
      "top-k", po::value(&top_k)->default_value(top_k), "0 = off")(
      "top-p", po::value(&top_p)->default_value(top_p), "1 = off")(
      "seed", po::value(&seed)->default_value(seed), "sampling seed")(
      "stop", po::value(&stops)->composing(), "stop string (repeatable)")(
      "param", po::value(&params)->composing(),
      "stage parameter override STAGE.KEY=VALUE (repeatable), e.g. select.keep_ratio=0.2")(
      "deadline-ms", po::value(&deadline_ms)->default_value(0), "request deadline (0 = none)")(
      "id", po::value(&id), "request id (default: generated)")(
      "no-stream", po::bool_switch(&no_stream), "do not stream; print the text at the end")(
      "json", po::bool_switch(&as_json), "print the final message as JSON");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(d).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "sift generate: " << e.what() << "\n" << d;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << "usage: sift [global options] generate [options]\n" << d;
    return 0;
  }
  json h = {{"type", "generate"},
            {"pipeline", pipeline},
            {"max_tokens", max_tokens},
            {"stream", !no_stream && !as_json}};
  h["id"] = id.empty() ? "cli-" + std::to_string(::getpid()) : id;
  const int inputs = int(!question.empty()) + int(!prompt.empty()) + int(!prompt_file.empty()) +
                     int(!messages.empty());
  if (inputs != 1 || (!context_file.empty() && question.empty())) {
    std::cerr << "sift generate: give one input: --question (with optional --context-file), "
                 "--prompt, --prompt-file or --message\n";
    return 2;
  }
  if (!question.empty()) {
    std::string context;
    if (!context_file.empty() && !ReadFile(context_file, &context)) {
      std::cerr << "sift generate: cannot read " << context_file << "\n";
      return 2;
    }
    h["context"] = context;
    h["question"] = question;
    if (!system.empty()) h["system"] = system;
  } else if (!prompt.empty() || !prompt_file.empty()) {
    if (!prompt_file.empty() && !ReadFile(prompt_file, &prompt)) {
      std::cerr << "sift generate: cannot read " << prompt_file << "\n";
      return 2;
    }
    h["prompt"] = prompt;
  } else {
    json list = json::array();
    for (const std::string& m : messages) {
      const size_t colon = m.find(':');
      if (colon == std::string::npos) {
        std::cerr << "sift generate: --message expects ROLE:TEXT\n";
        return 2;
      }
      list.push_back({{"role", m.substr(0, colon)}, {"content", m.substr(colon + 1)}});
    }
    h["messages"] = list;
  }
  h["sampling"] = {
      {"temperature", temperature}, {"top_k", top_k}, {"top_p", top_p}, {"seed", seed}};
  if (!stops.empty()) h["stop"] = stops;
  if (deadline_ms > 0) h["deadline_ms"] = deadline_ms;
  json overrides = json::object();
  for (const std::string& p : params) {
    const size_t dot = p.find('.'), eq = p.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot > eq) {
      std::cerr << "sift generate: --param expects STAGE.KEY=VALUE, got '" << p << "'\n";
      return 2;
    }
    overrides[p.substr(0, dot)][p.substr(dot + 1, eq - dot - 1)] = ParamValue(p.substr(eq + 1));
  }
  if (!overrides.empty()) h["params"] = overrides;

  zmq::context_t ctx(1);
  sift::client::SiftClient client(ctx, ClientOptionsFrom(common));
  std::signal(SIGINT, OnSigint);
  client.Send(h);
  const std::string rid = h["id"];
  bool got_any = false, cancel_sent = false, printed_text = false;
  auto last = Clock::now();
  for (;;) {
    json r;
    if (!client.Recv(&r, 100)) {
      if (g_interrupted && !cancel_sent) {
        client.Send({{"type", "cancel"}, {"id", rid}});
        cancel_sent = true;
        last = Clock::now();
      }
      const double idle = std::chrono::duration<double, std::milli>(Clock::now() - last).count();
      if (cancel_sent && idle > 2000) return 130;
      if (idle > (got_any ? kIdleTimeoutMs : kFirstReplyTimeoutMs)) {
        std::fprintf(stderr, "sift: no answer from %s (is siftd running?)\n",
                     common.endpoint.c_str());
        return 3;
      }
      continue;
    }
    got_any = true;
    last = Clock::now();
    if (r.value("id", json()) != json(rid)) continue;
    const std::string type = r.value("type", "");
    if (type == "chunk") {
      std::fputs(r.value("text", "").c_str(), stdout);
      std::fflush(stdout);
      printed_text = true;
    } else if (type == "final") {
      if (as_json) {
        std::printf("%s\n", r.dump(2, ' ', false, json::error_handler_t::replace).c_str());
      } else {
        if (!printed_text) std::fputs(r.value("text", "").c_str(), stdout);
        std::fputs("\n", stdout);
        PrintSummary(r);
      }
      return 0;
    } else if (type == "error") {
      if (r.value("duplicate", false)) continue;
      if (printed_text) std::fputs("\n", stdout);
      if (as_json) std::printf("%s\n", r.dump(2).c_str());
      PrintError(r);
      return cancel_sent ? 130 : 1;
    }
  }
}

int List(const Common& common, bool as_json) {
  zmq::context_t ctx(1);
  sift::client::SiftClient client(ctx, ClientOptionsFrom(common));
  client.Send({{"type", "list"}});
  json r;
  if (!client.Recv(&r, kFirstReplyTimeoutMs)) {
    std::fprintf(stderr, "sift: no answer from %s (is siftd running?)\n", common.endpoint.c_str());
    return 3;
  }
  if (as_json || r.value("type", "") != "listing") {
    std::printf("%s\n", r.dump(2).c_str());
    return r.value("type", "") == "listing" ? 0 : 1;
  }
  const json& m = r["model"];
  std::printf("model: %s (%s, %lld layers, context %lld, %s on %s)\n", m.value("name", "").c_str(),
              m.value("path", "").c_str(), static_cast<long long>(m.value("layers", 0)),
              static_cast<long long>(m.value("n_ctx", 0)), m.value("dtype", "").c_str(),
              m.value("device", "").c_str());
  std::printf("pipelines:\n");
  for (const json& p : r.value("pipelines", json::array())) {
    std::string stages;
    for (const json& s : p.value("stages", json::array())) {
      if (!stages.empty()) stages += " -> ";
      stages += s.is_object() ? s.value("plugin", s.value("label", "?")) : s.dump();
    }
    std::printf("  %-20s %s  %s%s\n", p.value("name", "").c_str(),
                p.value("ok", false) ? "ok    " : "FAILED", stages.c_str(),
                p.value("ok", false) ? "" : ("  " + p.value("error", "")).c_str());
  }
  std::printf("plugins:\n");
  for (const json& p : r.value("plugins", json::array())) {
    std::printf("  %-20s %-10s %-8s %s%s\n", p.value("name", "").c_str(),
                p.value("version", "").c_str(), p.value("kind", "").c_str(),
                p.value("ok", false) ? "ok" : "FAILED",
                p.value("ok", false) ? "" : ("  " + p.value("error", "")).c_str());
  }
  return 0;
}

int Ping(const Common& common, int count) {
  zmq::context_t ctx(1);
  sift::client::SiftClient client(ctx, ClientOptionsFrom(common));
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    client.Send({{"type", "ping"}, {"nonce", i}});
    json r;
    if (!client.Recv(&r, kFirstReplyTimeoutMs)) {
      std::fprintf(stderr, "sift: no answer from %s (is siftd running?)\n",
                   common.endpoint.c_str());
      return 3;
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i == 0) std::printf("%s\n", r.dump().c_str());
    std::printf("pong %d: %.3f ms\n", i, ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Common common;
  std::string command;
  bool as_json = false;
  int count = 1;
  po::options_description global(
      "sift: client of the siftd daemon.\n"
      "usage: sift [global options] generate|list|ping [options]\n"
      "global options");
  global.add_options()("help,h", "help (also: sift generate --help)")(
      "endpoint,e", po::value(&common.endpoint)->default_value(common.endpoint), "daemon endpoint")(
      "curve-server-key", po::value(&common.server_key),
      "server public key (file or Z85) for CURVE")(
      "curve-secret-key", po::value(&common.secret_key), "this client's secret key file for CURVE");
  po::options_description hidden;
  hidden.add_options()("command", po::value(&command))("args",
                                                       po::value<std::vector<std::string>>());
  po::positional_options_description pos;
  pos.add("command", 1).add("args", -1);
  po::options_description all;
  all.add(global).add(hidden);
  po::variables_map vm;
  std::vector<std::string> rest;
  try {
    po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(all).positional(pos).allow_unregistered().run();
    po::store(parsed, vm);
    po::notify(vm);
    rest = po::collect_unrecognized(parsed.options, po::include_positional);
    if (!rest.empty() && rest.front() == command) rest.erase(rest.begin());
  } catch (const po::error& e) {
    std::cerr << "sift: " << e.what() << "\n" << global;
    return 2;
  }
  try {
    if (command == "generate") {
      if (vm.count("help")) rest.push_back("--help");
      return Generate(common, rest);
    }
    if (vm.count("help") || command.empty()) {
      std::cout << global
                << "\ncommands:\n  generate  run a prompt through a pipeline (sift generate "
                   "--help)\n  list      pipelines, plugins and model (--json)\n  ping      "
                   "round trip (--count N)\n";
      return command.empty() && !vm.count("help") ? 2 : 0;
    }
    for (size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == "--json") {
        as_json = true;
      } else if (rest[i] == "--count" && i + 1 < rest.size()) {
        count = std::max(1, std::atoi(rest[++i].c_str()));
      } else {
        std::cerr << "sift " << command << ": unknown argument " << rest[i] << "\n";
        return 2;
      }
    }
    if (command == "list") return List(common, as_json);
    if (command == "ping") return Ping(common, count);
  } catch (const std::exception& e) {
    std::cerr << "sift: " << e.what() << "\n";
    return 2;
  }
  std::cerr << "sift: unknown command '" << command << "' (generate, list, ping)\n";
  return 2;
}
