// sift: command-line client of siftd (protocol SIFT/1 over ZeroMQ; docs/protocol.md).
//
//   sift generate --context-file FILE --question TEXT [--pipeline full] [options]
//   sift generate --prompt TEXT | --prompt-file FILE | --message ROLE:TEXT ... [options]
//   sift list [--json]
//   sift ping [--count N]
//   sift --help, sift COMMAND --help: the options (global options may also follow the command)
//
// generate streams the answer to stdout as it is produced and prints a one-line summary
// (tokens kept, TTFT, e2e) to stderr; --json prints the final message instead. Ctrl-C sends a
// cancel and waits briefly for the daemon's answer. Exit status: 0 ok, 1 error reply, 2 usage,
// 3 no answer from the daemon (unreachable, or it refused the handshake: the message says which
// where ZeroMQ reports it), 130 interrupted.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client.h"
#include "tools/common/command_line.h"

namespace {

namespace po = boost::program_options;
using sift::cli::kContinue;
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

// The global options. `defaults`: with their default values (before the command); after the
// command they only overwrite what is given there.
po::options_description GlobalOptions(Common* c, bool defaults) {
  po::options_description global("global options (before or after the command)");
  auto endpoint = po::value(&c->endpoint)->value_name("URL");
  if (defaults) endpoint->default_value(c->endpoint);
  // clang-format off
  global.add_options()
      ("endpoint,e", endpoint, "daemon endpoint")
      ("curve-server-key", po::value(&c->server_key)->value_name("KEY"),
       "server public key (file or Z85) for CURVE")
      ("curve-secret-key", po::value(&c->secret_key)->value_name("FILE"),
       "this client's secret key file for CURVE");
  // clang-format on
  return global;
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

// No reply came: says why where the client knows (a refused handshake), else that siftd may not
// be running. Returns the exit status (3).
int NoAnswer(const Common& common, sift::client::SiftClient& client) {
  const std::string why = client.ConnectionProblem();
  if (why.empty()) {
    std::fprintf(stderr, "sift: no answer from %s (is siftd running?)\n", common.endpoint.c_str());
  } else {
    std::fprintf(stderr, "sift: no answer from %s: %s\n", common.endpoint.c_str(), why.c_str());
  }
  return 3;
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

// The `kept` report (return_kept) in a few lines: per layer group, each KV head's kept count
// and its first ranges of positions; after a filter, the filtered prompt.
void PrintKept(const json& kept) {
  if (!kept.is_object()) return;
  std::fprintf(stderr, "kept: positions of the %lld-token prompt the cache was built from\n",
               static_cast<long long>(kept.value("tokens", 0)));
  for (const json& g : kept.value("layers", json::array())) {
    std::string heads;
    for (const json& ranges : g.value("heads", json::array())) {
      long long count = 0;
      std::string shown;
      for (size_t i = 0; i < ranges.size(); ++i) {
        const long long b = ranges[i][0], e = ranges[i][1];
        count += e - b;
        if (i < 4) shown += (i ? "," : "") + std::to_string(b) + "-" + std::to_string(e - 1);
      }
      if (ranges.size() > 4) shown += ",...";
      heads += (heads.empty() ? "" : "; ") + std::to_string(count) + " [" + shown + "]";
    }
    std::fprintf(stderr, "  layers %lld-%lld: %s\n", static_cast<long long>(g.value("first", 0)),
                 static_cast<long long>(g.value("last", 0)), heads.c_str());
  }
  if (kept.contains("filtered_prompt")) {
    std::fprintf(stderr, "filtered prompt (%lld of %lld tokens):\n%s\n",
                 static_cast<long long>(kept.value("tokens", 0)),
                 static_cast<long long>(kept.value("prompt_tokens", 0)),
                 kept.value("filtered_prompt", "").c_str());
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
  PrintKept(f.value("kept", json()));
}

// generate's options.
struct GenerateArgs {
  std::string context_file, question, prompt, prompt_file, pipeline = "full", id, system;
  std::vector<std::string> messages, stops, params;
  int64_t max_tokens = 128, top_k = 0, deadline_ms = 0, seed = 0;
  double temperature = 0, top_p = 1;
  bool no_stream = false, as_json = false, kept = false;
};

void AddGenerateOptions(sift::cli::CommandLine& cl, GenerateArgs* g) {
  cl.Add()("context-file", po::value(&g->context_file), "context text file (with --question)")(
      "question", po::value(&g->question), "the question about the context")(
      "system", po::value(&g->system), "system prompt (with --question)")(
      "prompt", po::value(&g->prompt), "raw prompt text (no chat template)")(
      "prompt-file", po::value(&g->prompt_file), "raw prompt from a file")(
      "message", po::value(&g->messages)->composing(), "chat message ROLE:TEXT (repeatable)")(
      "pipeline,p", po::value(&g->pipeline)->default_value(g->pipeline), "pipeline name")(
      "max-tokens,n", po::value(&g->max_tokens)->default_value(g->max_tokens),
      "tokens to generate")(
      "temperature", po::value(&g->temperature)->default_value(g->temperature), "0 = greedy")(
      "top-k", po::value(&g->top_k)->default_value(g->top_k), "0 = off")(
      "top-p", po::value(&g->top_p)->default_value(g->top_p), "1 = off")(
      "seed", po::value(&g->seed)->default_value(g->seed), "sampling seed")(
      "stop", po::value(&g->stops)->composing(), "stop string (repeatable)")(
      "param", po::value(&g->params)->composing(),
      "stage parameter override STAGE.KEY=VALUE (repeatable), e.g. select.keep_ratio=0.2")(
      "deadline-ms", po::value(&g->deadline_ms)->default_value(0), "request deadline (0 = none)")(
      "id", po::value(&g->id), "request id (default: generated)")(
      "no-stream", po::bool_switch(&g->no_stream), "do not stream; print the text at the end")(
      "json", po::bool_switch(&g->as_json), "print the final message as JSON")(
      "kept", po::bool_switch(&g->kept),
      "ask what the pipeline kept (return_kept): the kept positions per layer group and, after "
      "a filter, the filtered prompt");
}

// The request's input fields (context + question, prompt or messages) into `h`; "" or what is
// wrong with the options.
std::string SetInput(GenerateArgs& g, json* h) {
  const int inputs = int(!g.question.empty()) + int(!g.prompt.empty()) +
                     int(!g.prompt_file.empty()) + int(!g.messages.empty());
  if (inputs != 1 || (!g.context_file.empty() && g.question.empty())) {
    return "give one input: --question (with optional --context-file), --prompt, --prompt-file or "
           "--message";
  }
  if (!g.question.empty()) {
    std::string context;
    if (!g.context_file.empty() && !ReadFile(g.context_file, &context)) {
      return "cannot read " + g.context_file;
    }
    (*h)["context"] = context;
    (*h)["question"] = g.question;
    if (!g.system.empty()) (*h)["system"] = g.system;
  } else if (!g.prompt.empty() || !g.prompt_file.empty()) {
    if (!g.prompt_file.empty() && !ReadFile(g.prompt_file, &g.prompt)) {
      return "cannot read " + g.prompt_file;
    }
    (*h)["prompt"] = g.prompt;
  } else {
    json list = json::array();
    for (const std::string& m : g.messages) {
      const size_t colon = m.find(':');
      if (colon == std::string::npos) return "--message expects ROLE:TEXT, got '" + m + "'";
      list.push_back({{"role", m.substr(0, colon)}, {"content", m.substr(colon + 1)}});
    }
    (*h)["messages"] = list;
  }
  return "";
}

// The generate header from the options; "" or what is wrong with them.
std::string MakeGenerateHeader(GenerateArgs& g, json* h) {
  *h = {{"type", "generate"},
        {"pipeline", g.pipeline},
        {"max_tokens", g.max_tokens},
        {"stream", !g.no_stream && !g.as_json}};
  (*h)["id"] = g.id.empty() ? "cli-" + std::to_string(::getpid()) : g.id;
  if (std::string error = SetInput(g, h); !error.empty()) return error;
  (*h)["sampling"] = {
      {"temperature", g.temperature}, {"top_k", g.top_k}, {"top_p", g.top_p}, {"seed", g.seed}};
  if (!g.stops.empty()) (*h)["stop"] = g.stops;
  if (g.deadline_ms > 0) (*h)["deadline_ms"] = g.deadline_ms;
  if (g.kept) (*h)["return_kept"] = true;
  json overrides = json::object();
  for (const std::string& p : g.params) {
    const size_t dot = p.find('.'), eq = p.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot > eq) {
      return "--param expects STAGE.KEY=VALUE, got '" + p + "'";
    }
    overrides[p.substr(0, dot)][p.substr(dot + 1, eq - dot - 1)] = ParamValue(p.substr(eq + 1));
  }
  if (!overrides.empty()) (*h)["params"] = overrides;
  return "";
}

// Sends the request and prints its replies until the terminal one; Ctrl-C sends a cancel.
// Returns the exit status: 0 final, 1 error, 3 no answer, 130 cancelled.
int RunGenerate(const Common& common, const json& h, bool as_json) {
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
      if (client.ConnectionFailed() || idle > (got_any ? kIdleTimeoutMs : kFirstReplyTimeoutMs)) {
        return NoAnswer(common, client);
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
      // The partial answer was streamed to stdout already: not again on stderr.
      if (printed_text && r.contains("details") && r["details"].is_object()) {
        r["details"].erase("partial_text");
      }
      PrintError(r);
      return cancel_sent ? 130 : 1;
    }
  }
}

int Generate(Common& common, const std::vector<std::string>& args) {
  GenerateArgs g;
  sift::cli::CommandLine cl(
      "sift generate",
      "sift [global options] generate (--question TEXT [--context-file FILE] | --prompt TEXT |\n"
      "         --prompt-file FILE | --message ROLE:TEXT ...) [options]",
      "Runs one request through a pipeline of siftd and streams the answer to stdout; a summary "
      "line\n(tokens kept, TTFT, e2e) goes to stderr. Ctrl-C cancels the request.");
  AddGenerateOptions(cl, &g);
  cl.AddGroup(GlobalOptions(&common, false));
  po::variables_map vm;
  if (const int status = cl.Parse(args, &vm); status != kContinue) return status;
  json h;
  if (const std::string error = MakeGenerateHeader(g, &h); !error.empty()) return cl.Error(error);
  return RunGenerate(common, h, g.as_json);
}

int List(Common& common, const std::vector<std::string>& args) {
  bool as_json = false;
  sift::cli::CommandLine cl("sift list", "sift [global options] list [--json]",
                            "The daemon's model, pipelines (with their stages) and plugins.");
  cl.Add()("json", po::bool_switch(&as_json), "print the daemon's listing as JSON");
  cl.AddGroup(GlobalOptions(&common, false));
  po::variables_map vm;
  if (const int status = cl.Parse(args, &vm); status != kContinue) return status;
  zmq::context_t ctx(1);
  sift::client::SiftClient client(ctx, ClientOptionsFrom(common));
  client.Send({{"type", "list"}});
  json r;
  if (!client.Recv(&r, kFirstReplyTimeoutMs)) return NoAnswer(common, client);
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

int Ping(Common& common, const std::vector<std::string>& args) {
  int count = 1;
  sift::cli::CommandLine cl("sift ping", "sift [global options] ping [--count N]",
                            "Round trips to the daemon (the first reply is printed as JSON).");
  cl.Add()("count", po::value(&count)->default_value(count), "round trips (at least 1)");
  cl.AddGroup(GlobalOptions(&common, false));
  po::variables_map vm;
  if (const int status = cl.Parse(args, &vm); status != kContinue) return status;
  count = std::max(1, count);
  zmq::context_t ctx(1);
  sift::client::SiftClient client(ctx, ClientOptionsFrom(common));
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    client.Send({{"type", "ping"}, {"nonce", i}});
    json r;
    if (!client.Recv(&r, kFirstReplyTimeoutMs)) return NoAnswer(common, client);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i == 0) std::printf("%s\n", r.dump().c_str());
    std::printf("pong %d: %.3f ms\n", i, ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Common common;
  sift::cli::CommandLine cl("sift", "sift [global options] COMMAND [options]",
                            "The command-line client of siftd (protocol SIFT/1 over ZeroMQ; "
                            "docs/protocol.md).");
  cl.AddGroup(GlobalOptions(&common, true));
  cl.Command("generate", "run a prompt through a pipeline, streaming the answer");
  cl.Command("list", "the daemon's model, pipelines and plugins (--json)");
  cl.Command("ping", "round trips to the daemon (--count N)");
  cl.Epilog(
      "exit status: 0 ok, 1 error reply, 2 usage, 3 no answer from the daemon (unreachable, "
      "or it refused the handshake), 130 interrupted");
  po::variables_map vm;
  std::string command;
  std::vector<std::string> rest;
  if (const int status = cl.ParseCommand(argc, argv, &vm, &command, &rest); status != kContinue) {
    return status;
  }
  if (command.empty()) return cl.Error("no command (generate, list or ping)");
  return sift::cli::Run("sift " + command, 2, [&] {
    if (command == "generate") return Generate(common, rest);
    if (command == "list") return List(common, rest);
    return Ping(common, rest);
  });
}
