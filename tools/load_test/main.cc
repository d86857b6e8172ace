// sift-load-test: drives a running siftd with many concurrent DEALER clients and checks the
// protocol's promises under load; writes a results document (docs/results/daemon-load.md).
//
//   sift-load-test --ready-file READY.json [--clients 32] [--requests 20] [--pipeline full]
//                  [--swap-hook CMD] [--out FILE (a section is appended)] [--label TITLE]
//
// Phases: warm-up (a few sequential requests; then the daemon's RSS is the baseline), idle
// ping round trips, then the load: every client keeps one generate in flight at a time
// (closed loop) while a pinger measures round trips and the swap hook (e.g. copy a new plugin
// build into the plugins folder and SIGHUP the daemon) runs at 1/3 and 2/3 of the requests.
// Checks: every request gets exactly one terminal message (final or error) and nothing after
// it; retryable rejections are retried with a new id. Reports requests/s, the daemon's own
// overhead per request (e2e - queue - stage time, from each final's stats), client-observed
// transport overhead (client round trip - daemon e2e), ping round trips and RSS.
//
// Loopback only; bounded by --timeout-s. Exit status 0 when every check passed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client.h"
#include "tools/common/command_line.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Args {
  std::string ready_file, endpoint, pipeline = "full", swap_hook, out, label, summary_row;
  std::string prompt = "Name a colour.";
  int clients = 32, requests = 20, max_tokens = 2, idle_pings = 1000, timeout_s = 600;
  int idle_generates = 0, rounds = 1;
  int64_t pid = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

int64_t RssKb(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

std::string Fmt(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Shared results of the load phase.
struct Results {
  std::mutex mu;
  std::vector<double> overhead_ms, transport_ms, client_e2e_ms, daemon_e2e_ms, queue_ms;
  std::map<std::string, int> outcomes;  // "final" or the error code
  std::map<int64_t, int> generations;   // catalog generation a request ran on -> count
  int violations = 0;
  std::vector<std::string> problems;
  std::atomic<int> done{0};
  std::atomic<int> rejected{0};

  void Problem(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    ++violations;
    if (problems.size() < 20) problems.push_back(what);
  }
};

json BaseRequest(const Args& a) {
  return {{"type", "generate"},
          {"pipeline", a.pipeline},
          {"prompt", a.prompt},
          {"max_tokens", a.max_tokens},
          {"stream", true}};
}

// One closed-loop client: `count` requests, one in flight at a time.
void RunClient(zmq::context_t& ctx, const Args& a, int index, int count, Results* r,
               Clock::time_point deadline) {
  sift::client::ClientOptions o;
  o.endpoint = a.endpoint;
  sift::client::SiftClient client(ctx, o);
  for (int i = 0; i < count && Clock::now() < deadline; ++i) {
    for (int attempt = 0;; ++attempt) {
      json req = BaseRequest(a);
      const std::string id =
          "c" + std::to_string(index) + "-r" + std::to_string(i) + "-a" + std::to_string(attempt);
      req["id"] = id;
      const auto sent = Clock::now();
      try {
        client.Send(req);
      } catch (const std::exception& e) {  // refused by the server: this client stops
        r->Problem(id + ": " + e.what());
        return;
      }
      int terminals = 0;
      json terminal;
      int64_t last_seq = -1;
      while (terminals == 0 && Clock::now() < deadline) {
        json h;
        if (!client.Recv(&h, 1000)) continue;
        if (h.value("id", json()) != json(id)) {
          r->Problem("reply for unexpected id " + h.dump().substr(0, 120));
          continue;
        }
        const std::string type = h.value("type", "");
        if (type == "chunk") {
          const int64_t seq = h.value("seq", -1);
          if (seq != last_seq + 1) r->Problem(id + ": chunk seq gap");
          last_seq = seq;
        } else if (type == "final" || type == "error") {
          ++terminals;
          terminal = h;
        } else if (type != "accepted" && type != "heartbeat") {
          r->Problem(id + ": unexpected message type " + type);
        }
      }
      const auto got = Clock::now();
      if (terminals == 0) {
        r->Problem(id + ": no terminal message before the time limit");
        return;
      }
      // Nothing may follow a terminal message for this id; checked at the end (drain).
      const std::string type = terminal["type"];
      if (type == "error" && terminal.value("retryable", false) && attempt < 50) {
        r->rejected.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(
            std::min<int64_t>(terminal.value("retry_after_ms", 50), 500)));
        continue;
      }
      std::lock_guard<std::mutex> lock(r->mu);
      r->outcomes[type == "final" ? "final" : terminal.value("code", "?")]++;
      if (type == "final") {
        const json& s = terminal["stats"];
        double stage_ms = 0;
        for (const json& st : s["stages"]) stage_ms += st.value("ms", 0.0);
        const double e2e = s.value("e2e_ms", 0.0), queue = s.value("queue_ms", 0.0);
        r->overhead_ms.push_back(e2e - queue - stage_ms);
        r->generations[s.value("catalog_generation", int64_t{0})]++;
        r->daemon_e2e_ms.push_back(e2e);
        r->queue_ms.push_back(queue);
        r->client_e2e_ms.push_back(Ms(sent, got));
        r->transport_ms.push_back(Ms(sent, got) - e2e);
      }
      break;
    }
    r->done.fetch_add(1);
  }
  // Drain: anything still arriving is a duplicate or a message after a terminal.
  json h;
  while (client.Recv(&h, 300)) {
    if (h.value("type", "") != "heartbeat") r->Problem("message after terminal: " + h.dump());
  }
}

std::vector<double> PingLoop(zmq::context_t& ctx, const Args& a, int count,
                             const std::atomic<bool>* stop, int gap_ms) {
  sift::client::ClientOptions o;
  o.endpoint = a.endpoint;
  sift::client::SiftClient client(ctx, o);
  std::vector<double> rtt;
  for (int i = 0; (count < 0 || i < count) && !(stop && stop->load()); ++i) {
    const auto t0 = Clock::now();
    try {
      client.Send({{"type", "ping"}, {"nonce", i}});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sift-load-test: ping: %s\n", e.what());
      break;
    }
    json h;
    if (!client.Recv(&h, 5000)) break;
    rtt.push_back(Ms(t0, Clock::now()));
    if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
  return rtt;
}

// kContinue, or the exit status (help or a usage error, printed). Throws on an unreadable
// ready file.
int ParseArgs(int argc, char** argv, Args* a) {
  namespace po = boost::program_options;
  sift::cli::CommandLine cl(
      "sift-load-test",
      "sift-load-test (--ready-file READY.json | --endpoint E [--pid P]) [options]",
      "Drives a running siftd with many concurrent clients and checks the protocol's promises\n"
      "under load; appends a results section to --out (docs/results/daemon-load.md). Exit status\n"
      "0 when every check passed.");
  // clang-format off
  cl.Add()
      ("ready-file", po::value(&a->ready_file)->value_name("FILE"),
       "siftd's --ready-file: the endpoint and the pid")
      ("endpoint", po::value(&a->endpoint)->value_name("E"), "the daemon's endpoint")
      ("pid", po::value(&a->pid)->value_name("P"), "the daemon's pid (RSS samples)")
      ("clients", po::value(&a->clients)->default_value(a->clients), "concurrent clients")
      ("requests", po::value(&a->requests)->default_value(a->requests), "requests per client")
      ("rounds", po::value(&a->rounds)->default_value(a->rounds), "rounds of the load (at least 1)")
      ("pipeline", po::value(&a->pipeline)->default_value(a->pipeline), "pipeline")
      ("prompt", po::value(&a->prompt)->default_value(a->prompt), "raw prompt")
      ("max-tokens", po::value(&a->max_tokens)->default_value(a->max_tokens), "tokens to generate")
      ("idle-pings", po::value(&a->idle_pings)->default_value(a->idle_pings),
       "ping round trips on the idle daemon")
      ("idle-generates", po::value(&a->idle_generates)->default_value(a->idle_generates),
       "sequential requests on the idle daemon")
      ("swap-hook", po::value(&a->swap_hook)->value_name("CMD"),
       "shell command run at 1/3 and 2/3 of the requests (e.g. swap a plugin, SIGHUP)")
      ("out", po::value(&a->out)->value_name("FILE"), "append a Markdown section here")
      ("summary-row", po::value(&a->summary_row)->value_name("FILE"),
       "append a one-line summary row here")
      ("label", po::value(&a->label)->value_name("TEXT"), "section title")
      ("timeout-s", po::value(&a->timeout_s)->default_value(a->timeout_s), "bound on the run");
  // clang-format on
  po::variables_map vm;
  if (const int status = cl.Parse(argc, argv, &vm); status != sift::cli::kContinue) return status;
  a->rounds = std::max(1, a->rounds);
  if (!a->ready_file.empty()) {
    std::ifstream in(a->ready_file);
    json ready = json::parse(in, nullptr, false);
    if (ready.is_discarded()) throw std::runtime_error("cannot read " + a->ready_file);
    a->endpoint = ready["endpoints"][0];
    a->pid = ready.value("pid", 0);
  }
  if (a->endpoint.empty()) return cl.Error("--endpoint or --ready-file is required");
  return sift::cli::kContinue;
}

// What the phases measured, filled in order by main and RunLoad.
struct Measured {
  int64_t rss_base = -1, rss_after = -1;
  std::atomic<int64_t> rss_peak{-1};
  std::vector<double> idle_ping, load_ping;
  std::vector<double> rss_rounds;  // MB after each round
  Results idle_gen, load;
  std::vector<std::string> swaps;
  double wall_s = 0;
  int total = 0, completed = 0;
};

// Runs the swap hook at 1/3 and 2/3 of the first round's requests.
void RunSwaps(const Args& a, const std::atomic<bool>& stop, Measured* m) {
  if (a.swap_hook.empty()) return;
  const int round_total = a.clients * a.requests;
  Results& r = m->load;
  for (int k = 1; k <= 2 && !stop.load(); ++k) {
    while (!stop.load() && r.done.load() < round_total * k / 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (stop.load()) return;
    const auto t0 = Clock::now();
    const int rc = std::system(a.swap_hook.c_str());
    m->swaps.push_back("swap " + std::to_string(k) + " at request " +
                       std::to_string(r.done.load()) + ": exit " + std::to_string(rc) + " (" +
                       Fmt(Ms(t0, Clock::now()), 0) + " ms)");
    if (rc != 0) r.Problem("swap hook failed: exit " + std::to_string(rc));
  }
}

// The load: a.rounds rounds of a.clients closed-loop clients, with a pinger, an RSS sampler and
// the swap hook beside them.
void RunLoad(zmq::context_t& ctx, const Args& a, Clock::time_point deadline, Measured* m) {
  std::atomic<bool> stop{false};
  m->rss_peak = m->rss_base;
  std::thread pinger([&] { m->load_ping = PingLoop(ctx, a, -1, &stop, 5); });
  std::thread sampler([&] {
    while (!stop.load()) {
      if (a.pid) m->rss_peak = std::max<int64_t>(m->rss_peak.load(), RssKb(a.pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::thread swapper([&] { RunSwaps(a, stop, m); });
  for (int round = 0; round < a.rounds; ++round) {
    const auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int i = 0; i < a.clients; ++i) {
      clients.emplace_back(
          [&, i, round] { RunClient(ctx, a, i + 1000 * round, a.requests, &m->load, deadline); });
    }
    for (auto& t : clients) t.join();
    m->wall_s += Ms(start, Clock::now()) / 1000;
    if (round == 0) swapper.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    m->rss_rounds.push_back(a.pid ? RssKb(a.pid) / 1024.0 : -1);
  }
  stop = true;
  pinger.join();
  sampler.join();
  m->rss_after = a.pid ? RssKb(a.pid) : -1;
}

json P50P99(const std::vector<double>& v) {
  return {{"p50", Percentile(v, 50)}, {"p99", Percentile(v, 99)}};
}

json NP50P99(const std::vector<double>& v) {
  return {{"n", v.size()}, {"p50", Percentile(v, 50)}, {"p99", Percentile(v, 99)}};
}

// The JSON summary printed on stdout.
json Summarize(const Args& a, const Measured& m) {
  const Results& r = m.load;
  return {
      {"clients", a.clients},
      {"requests_per_client", a.requests},
      {"completed", m.completed},
      {"outcomes", r.outcomes},
      {"retried_rejections", r.rejected.load()},
      {"violations", r.violations},
      {"problems", r.problems},
      {"wall_s", m.wall_s},
      {"requests_per_s", m.completed / m.wall_s},
      {"overhead_ms",
       {{"p50", Percentile(r.overhead_ms, 50)},
        {"p99", Percentile(r.overhead_ms, 99)},
        {"max", Percentile(r.overhead_ms, 100)}}},
      {"transport_ms", P50P99(r.transport_ms)},
      {"client_e2e_ms", P50P99(r.client_e2e_ms)},
      {"daemon_e2e_ms", P50P99(r.daemon_e2e_ms)},
      {"queue_ms", P50P99(r.queue_ms)},
      {"ping_idle_ms", NP50P99(m.idle_ping)},
      {"ping_load_ms", NP50P99(m.load_ping)},
      {"rss_mb",
       {{"baseline", m.rss_base / 1024.0},
        {"peak", m.rss_peak.load() / 1024.0},
        {"after", m.rss_after / 1024.0},
        {"growth", (m.rss_after - m.rss_base) / 1024.0}}},
      {"swaps", m.swaps},
      {"catalog_generations", json(r.generations).dump()},
      {"rss_mb_after_each_round", m.rss_rounds},
      {"idle_generate_ms", NP50P99(m.idle_gen.client_e2e_ms)},
  };
}

// The checks table of the Markdown section.
void WriteChecks(const Args& a, const Measured& m, std::ostream& md) {
  const Results& r = m.load;
  md << "| check | result |\n|---|---|\n"
     << "| requests completed | " << m.completed << " of " << m.total << " |\n"
     << "| outcomes | `" << json(r.outcomes).dump() << "` |\n"
     << "| retryable rejections (retried) | " << r.rejected.load() << " |\n"
     << "| exactly one terminal per request, nothing after it, chunk seq without gaps | "
     << (r.violations == 0 ? "yes" : "NO: " + std::to_string(r.violations) + " violations")
     << " |\n"
     << "| plugin hot swaps during the load | " << m.swaps.size() << " |\n";
  for (const std::string& s : m.swaps) md << "| | " << s << " |\n";
  md << "| requests per catalog generation `[generation, count]` | `" << json(r.generations).dump()
     << "` |\n"
     << "| daemon RSS baseline / peak / after (MB) | " << Fmt(m.rss_base / 1024.0, 1) << " / "
     << Fmt(m.rss_peak.load() / 1024.0, 1) << " / " << Fmt(m.rss_after / 1024.0, 1) << " (growth "
     << Fmt((m.rss_after - m.rss_base) / 1024.0, 1) << " MB) |\n";
  if (a.rounds > 1) {
    md << "| daemon RSS after each round (MB) |";
    for (double v : m.rss_rounds) md << " " << Fmt(v, 1);
    md << " |\n";
  }
  md << "| throughput | " << Fmt(m.completed / m.wall_s, 1) << " requests/s (" << m.completed
     << " in " << Fmt(m.wall_s, 2) << " s) |\n\n";
}

// Appends one section to --out; tools/load_test/run.sh writes the document's head.
void AppendSection(const Args& a, const Measured& m, const json& summary) {
  std::ostringstream md;
  auto row = [&](const std::string& what, const json& v, const std::string& note) {
    md << "| " << what << " | " << Fmt(v["p50"].get<double>()) << " | "
       << Fmt(v["p99"].get<double>()) << " | " << note << " |\n";
  };
  md << "## " << (a.label.empty() ? "Run" : a.label) << "\n\n"
     << "Workload: " << a.clients << " concurrent DEALER clients x " << a.requests
     << " requests each" << (a.rounds > 1 ? " x " + std::to_string(a.rounds) + " rounds" : "")
     << ", one request in flight per client (closed loop), pipeline `" << a.pipeline
     << "`, prompt \"" << a.prompt << "\" (raw prompt), max_tokens " << a.max_tokens
     << ", streaming on. A pinger sends `ping` every 5 ms during the load.\n\n";
  WriteChecks(a, m, md);
  md << "| latency (ms) | p50 | p99 | what it is |\n|---|---|---|---|\n";
  row("daemon overhead per request", summary["overhead_ms"],
      "from each final's stats: e2e - queue - sum(stage ms) = parse, admission, "
      "tokenisation, dispatch, chunk/final building");
  row("transport + I/O thread", summary["transport_ms"],
      "client round trip - daemon e2e: ZeroMQ both ways, loopback TCP, I/O thread, the "
      "client's own scheduling");
  row("ping round trip, idle", summary["ping_idle_ms"],
      std::to_string(m.idle_ping.size()) + " sequential pings before the load");
  row("ping round trip, under load", summary["ping_load_ms"],
      std::to_string(m.load_ping.size()) + " pings during the load");
  if (a.idle_generates > 0) {
    row("generate round trip, one client", summary["idle_generate_ms"],
        std::to_string(a.idle_generates) +
            " sequential generates before the load: send to final, at the client");
  }
  row("queue wait", summary["queue_ms"], "admission to worker start");
  row("daemon e2e", summary["daemon_e2e_ms"], "arrival to final, inside the daemon");
  row("client e2e", summary["client_e2e_ms"], "send to final, at the client");
  md << "\n";
  if (!m.load.problems.empty()) {
    md << "Problems:\n\n";
    for (const std::string& p : m.load.problems) md << "- " << p << "\n";
    md << "\n";
  }
  std::ofstream(a.out, std::ios::app) << md.str();
}

// One row of run.sh's summary table, appended to --summary-row.
void AppendSummaryRow(const Args& a, const Measured& m, const json& summary) {
  auto pair = [&](const json& v) {
    return v["n"].is_number() && v["n"].get<size_t>() == 0
               ? std::string("-")
               : Fmt(v["p50"].get<double>()) + " / " + Fmt(v["p99"].get<double>());
  };
  const int violations = m.load.violations;
  std::ofstream(a.summary_row, std::ios::app)
      << "| " << a.label << " | " << m.completed << " / " << m.total << " | "
      << (violations == 0 ? "0" : std::to_string(violations)) << " | "
      << Fmt(m.completed / m.wall_s, 1) << " | " << Fmt(summary["overhead_ms"]["p50"].get<double>())
      << " / " << Fmt(summary["overhead_ms"]["p99"].get<double>()) << " | "
      << pair(summary["idle_generate_ms"]) << " | " << pair(summary["ping_idle_ms"]) << " | "
      << Fmt((m.rss_after - m.rss_base) / 1024.0, 1) << " |\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    if (const int status = ParseArgs(argc, argv, &a); status != sift::cli::kContinue) {
      return status;
    }
  } catch (const std::exception& e) {
    std::cerr << "sift-load-test: error: " << e.what() << "\n";
    return 2;
  }
  zmq::context_t ctx(2);
  const auto deadline = Clock::now() + std::chrono::seconds(a.timeout_s);
  Results warm;
  RunClient(ctx, a, 999, 3, &warm, deadline);
  if (warm.violations || warm.outcomes["final"] != 3) {
    std::cerr << "warm-up failed: " << json(warm.outcomes).dump() << " "
              << (warm.problems.empty() ? "" : warm.problems[0]) << "\n";
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Measured m;
  m.rss_base = a.pid ? RssKb(a.pid) : -1;
  m.idle_ping = PingLoop(ctx, a, a.idle_pings, nullptr, 0);
  if (a.idle_generates > 0) RunClient(ctx, a, 998, a.idle_generates, &m.idle_gen, deadline);
  RunLoad(ctx, a, deadline, &m);

  m.total = a.clients * a.requests * a.rounds;
  for (const auto& [k, v] : m.load.outcomes) m.completed += v;
  if (m.completed != m.total) {
    m.load.Problem("completed " + std::to_string(m.completed) + " of " + std::to_string(m.total));
  }
  const json summary = Summarize(a, m);
  std::cout << summary.dump(2) << "\n";
  if (!a.out.empty()) AppendSection(a, m, summary);
  if (!a.summary_row.empty()) AppendSummaryRow(a, m, summary);
  return m.load.violations == 0 ? 0 : 1;
}
