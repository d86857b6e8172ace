// Reliability: no client message, plugin file or peer can crash the real siftd or take what
// belongs to another client (issue 12's table, one test or more per row). Every test starts
// build/bin/siftd as a process on ephemeral loopback ports (tests/support/siftd_process.h) with
// the real model and real plugin files, and most keep another client's requests running
// throughout (Traffic) to check that everyone else is still answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <zmq_addon.hpp>

#include "client.h"
#include "support/siftd_process.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using sift::client::SiftClient;
using sift::testing::ReadAll;
using Daemon = sift::testing::SiftdProcess;

std::string Plugin(const std::string& name) {
  return std::string(SIFT_BINARY_DIR) + "/plugins/" + name + ".so";
}
std::string Fixture(const std::string& name) {
  return std::string(SIFT_BINARY_DIR) + "/tests/fixtures/plugins/" + name + ".so";
}
std::string Pipeline(const std::string& name) {
  return std::string(SIFT_SOURCE_DIR) + "/pipelines/" + name + ".toml";
}

bool HaveModelAndPlugins(std::string* why) {
  if (sift::testing::ModelPath().empty()) {
    *why = "SIFT_MODEL not set";
    return false;
  }
  for (const char* p : {"prefill_full", "decode_local", "keep_recent"}) {
    if (!fs::exists(Plugin(p))) {
      *why = std::string("plugin ") + p + " not built";
      return false;
    }
  }
  return true;
}

#define REQUIRE_MODEL()                    \
  do {                                     \
    std::string why_skip;                  \
    if (!HaveModelAndPlugins(&why_skip)) { \
      GTEST_SKIP() << why_skip;            \
    }                                      \
  } while (0)

// Writes `bytes` to `path` atomically (beside it, then renamed over), as an operator should.
void Install(const std::string& path, const std::string& bytes) {
  const std::string tmp = fs::path(path).parent_path() / ".installing.partial";
  std::ofstream(tmp, std::ios::binary) << bytes;
  fs::rename(tmp, path);
}

std::string Bytes(const std::string& path) { return ReadAll(path); }

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

int64_t RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A free loopback TCP port with nothing listening on it (bound, then closed).
int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::unique_ptr<SiftClient> Connect(zmq::context_t& ctx, const Daemon& d) {
  sift::client::ClientOptions o;
  o.endpoint = d.endpoint();
  return std::make_unique<SiftClient>(ctx, o);
}

// Every reply for `id` up to its terminal message.
std::vector<json> Replies(SiftClient& c, const std::string& id, int timeout_ms = 120000) {
  std::vector<json> out;
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  json h;
  while (Clock::now() < end) {
    if (!c.Recv(&h, 100) || h.value("id", json()) != json(id)) continue;
    out.push_back(h);
    if ((h["type"] == "final" || h["type"] == "error") && !h.value("duplicate", false)) return out;
  }
  ADD_FAILURE() << "no terminal message for " << id;
  return out;
}

json Terminal(SiftClient& c, const std::string& id) {
  std::vector<json> r = Replies(c, id);
  return r.empty() ? json() : r.back();
}

// The terminal message of each of `ids`, which are in flight together and may end in any order
// (reading them one by one would drop a terminal that arrives before an earlier id's).
std::map<std::string, json> Terminals(SiftClient& c, const std::set<std::string>& ids,
                                      int timeout_ms = 120000) {
  std::map<std::string, json> out;
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  json h;
  while (out.size() < ids.size() && Clock::now() < end) {
    if (!c.Recv(&h, 100) || !h.contains("id") || !h["id"].is_string()) continue;
    const std::string id = h["id"].get<std::string>();
    if (ids.count(id) == 0 || h.value("duplicate", false)) continue;
    if (h["type"] == "final" || h["type"] == "error") out[id] = h;
  }
  for (const std::string& id : ids) {
    if (out.count(id) == 0) ADD_FAILURE() << "no terminal message for " << id;
  }
  return out;
}

json Generate(const std::string& id, const std::string& pipeline, int max_tokens = 2) {
  return {{"type", "generate"},
          {"id", id},
          {"pipeline", pipeline},
          {"prompt", "Colours: red, green,"},
          {"max_tokens", max_tokens}};
}

// The reply to one non-generate message (ping, list, a refused message).
json Ask(SiftClient& c, const std::vector<std::string>& frames, int timeout_ms = 30000) {
  c.SendRaw(frames);
  json h;
  if (!c.Recv(&h, timeout_ms)) return json();
  return h;
}

bool Pong(zmq::context_t& ctx, const Daemon& d) {
  auto c = Connect(ctx, d);
  c->Send({{"type", "ping"}, {"nonce", 7}});
  json h;
  return c->Recv(&h, 30000) && h["type"] == "pong" && h["nonce"] == 7;
}

// Another client's steady stream of small generates (one in flight) while a test misbehaves:
// every request must end with a final.
class Traffic {
 public:
  Traffic(const Daemon& d, std::vector<std::string> pipelines) {
    thread_ = std::thread([this, endpoint = d.endpoint(), pipelines] {
      zmq::context_t ctx(1);
      sift::client::ClientOptions o;
      o.endpoint = endpoint;
      SiftClient c(ctx, o);
      for (int i = 0; !stop_.load(); ++i) {
        const std::string id = "traffic-" + std::to_string(i);
        c.Send(Generate(id, pipelines[static_cast<size_t>(i) % pipelines.size()]));
        ++sent_;
        const std::vector<json> r = Replies(c, id);
        if (!r.empty() && r.back()["type"] == "final") {
          ++finals_;
        } else {
          failures_.push_back(r.empty() ? json("no reply") : r.back());
        }
      }
    });
  }
  // Stops after the request in flight; returns the failures (empty: all answered with a final).
  std::vector<json> Finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return failures_;
  }
  int sent() const { return sent_.load(); }
  int finals() const { return finals_.load(); }
  ~Traffic() { Finish(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> sent_{0}, finals_{0};
  std::vector<json> failures_;
  std::thread thread_;
};

void ExpectTrafficAnswered(Traffic& traffic) {
  const int sent_before = traffic.sent();
  // At least one more request completes after the misbehaviour.
  const auto end = Clock::now() + std::chrono::seconds(120);
  while (traffic.sent() < sent_before + 2 && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<json> failures = traffic.Finish();
  EXPECT_GE(traffic.finals(), 1);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << traffic.sent()
                                << " requests failed; first: " << failures.front().dump();
}

// ---- one daemon for the client-message rows (1, 4, 5, 6, 9, 11, 12, in-flight limit) ----

class HostileClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    if (!HaveModelAndPlugins(&why)) return;
    daemon_ = new Daemon();
    start_error_ = daemon_->Start({"--n-ctx", "512", "--heartbeat-ms", "300", "--workers", "1",
                                   "--max-client-inflight", "4", "--log-level", "debug"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    REQUIRE_MODEL();
    ASSERT_NE(daemon_, nullptr);
    ASSERT_EQ(start_error_, "");
  }
  void TearDown() override {
    if (daemon_ != nullptr && start_error_.empty()) {
      EXPECT_GT(daemon_->pid(), 0) << "siftd died:\n" << daemon_->log();
    }
  }
  std::unique_ptr<SiftClient> Client() { return Connect(ctx_, *daemon_); }

  static inline Daemon* daemon_ = nullptr;
  static inline std::string start_error_;
  zmq::context_t ctx_{1};
};

std::string Deep(size_t levels, bool objects = false) {
  std::string s;
  s.reserve(levels * 8);
  for (size_t i = 0; i < levels; ++i) s += objects ? "{\"a\":" : "[";
  s += "1";
  for (size_t i = 0; i < levels; ++i) s += objects ? "}" : "]";
  return s;
}

// Row 1: ~58,000 levels (~116 KB) in every field the daemon echoes or copies.
TEST_F(HostileClientTest, DeeplyNestedJsonInAnyFieldIsRefusedWhileParsing) {
  Traffic traffic(*daemon_, {"full"});
  const std::string deep = Deep(58000);
  ASSERT_GE(deep.size(), 116000u);
  const std::string deep_obj = Deep(20000, true);
  const std::string gen = R"("type":"generate","pipeline":"full","prompt":"Hi")";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ping nonce", R"({"type":"ping","id":"p1","nonce":)" + deep + "}"},
      {"ping nonce (objects)", R"({"type":"ping","id":"p2","nonce":)" + deep_obj + "}"},
      {"type", R"({"id":"t1","type":)" + deep + "}"},
      {"id", R"({"type":"ping","id":)" + deep + "}"},
      {"params override", R"({"id":"g1",)" + gen + R"(,"params":{"prefill":)" + deep + "}}"},
      {"params value",
       R"({"id":"g2",)" + gen + R"(,"params":{"prefill":{"chunk_size":)" + deep + "}}}"},
      {"params (objects)", R"({"id":"g3",)" + gen + R"(,"params":)" + deep_obj + "}"},
      {"sampling", R"({"id":"g4",)" + gen + R"(,"sampling":)" + deep + "}"},
      {"stop", R"({"id":"g5",)" + gen + R"(,"stop":)" + deep + "}"},
      {"messages", R"({"id":"g6","type":"generate","pipeline":"full","messages":)" + deep + "}"},
      {"tokens", R"({"id":"g7","type":"generate","pipeline":"full","tokens":)" + deep + "}"},
      {"cancel id", R"({"type":"cancel","id":)" + deep + "}"},
      {"unknown field", R"({"type":"list","id":"l1","whatever":)" + deep + "}"},
      {"whole header", deep},
  };
  auto c = Client();
  for (const auto& [field, header] : cases) {
    SCOPED_TRACE(field);
    const json h = Ask(*c, {"SIFT/1", header});
    ASSERT_EQ(h.value("type", ""), "error") << h.dump().substr(0, 300);
    EXPECT_EQ(h["code"], "INVALID_ARGUMENT");
    EXPECT_EQ(h["reason"], "too_deep") << h.dump().substr(0, 300);
    EXPECT_NE(h["message"].get<std::string>().find("nested deeper than 64"), std::string::npos);
    EXPECT_TRUE(Pong(ctx_, *daemon_)) << "siftd stopped answering after " << field;
  }
  // The id is still echoed when it comes before the deep part.
  EXPECT_EQ(Ask(*c, {"SIFT/1", cases[0].second})["id"], "p1");
  // Within the limit the nonce is echoed as sent.
  const json ok = Ask(*c, {"SIFT/1", R"({"type":"ping","nonce":)" + Deep(60) + "}"});
  EXPECT_EQ(ok["type"], "pong");
  EXPECT_EQ(ok["nonce"].dump(), Deep(60));
  ExpectTrafficAnswered(traffic);
}

// Row 4: huge headers are refused before parsing (size) or while parsing (value counts), memory
// goes back to the system, and other clients are served meanwhile.
TEST_F(HostileClientTest, HugeHeadersAreRefusedAndMemoryIsReturned) {
  Traffic traffic(*daemon_, {"full"});
  const int64_t rss_before = RssKb(daemon_->pid());
  auto body = [](size_t bytes, const std::string& item) {
    std::string s = "[";
    while (s.size() + item.size() + 2 < bytes) s += item + ",";
    s += item + "]";
    return s;
  };
  const std::string big_empty = body(60u << 20, "[]");  // 60 MB: over --max-header-bytes
  const std::string many_empty = body(7u << 20, "[]");  // 7 MB: 2.4 M arrays
  const std::string many_ints = body(7u << 20, "1");    // 7 MB: 3.7 M integers
  struct Case {
    std::string id, header, reason;
  };
  const std::vector<Case> cases = {
      {"h1", R"({"type":"ping","id":"h1","nonce":)" + big_empty + "}", "header_too_large"},
      {"h2", R"({"type":"ping","id":"h2","nonce":)" + many_empty + "}", "too_many_values"},
      {"h3", R"({"type":"ping","id":"h3","nonce":)" + many_ints + "}", "too_many_values"},
  };
  // Four at once, from four clients, while a fifth keeps pinging.
  std::atomic<bool> done{false};
  std::atomic<int> pongs{0}, missed{0};
  std::thread pinger([&] {
    zmq::context_t ctx(1);
    auto c = Connect(ctx, *daemon_);
    for (int i = 0; !done.load(); ++i) {
      c->Send({{"type", "ping"}, {"nonce", i}});
      json h;
      (c->Recv(&h, 30000) && h["nonce"] == i ? pongs : missed)++;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (const Case& c : cases) {
    std::vector<std::thread> senders;
    std::vector<json> replies(4);
    for (int k = 0; k < 4; ++k) {
      senders.emplace_back([&, k] {
        zmq::context_t ctx(1);
        auto client = Connect(ctx, *daemon_);
        replies[static_cast<size_t>(k)] = Ask(*client, {"SIFT/1", c.header}, 60000);
      });
    }
    for (auto& t : senders) t.join();
    for (const json& h : replies) {
      EXPECT_EQ(h.value("code", ""), "INVALID_ARGUMENT") << h.dump().substr(0, 300);
      EXPECT_EQ(h.value("reason", ""), c.reason) << h.dump().substr(0, 300);
      EXPECT_EQ(h.value("id", json()), c.id);
    }
  }
  done = true;
  pinger.join();
  EXPECT_GT(pongs.load(), 0);
  EXPECT_EQ(missed.load(), 0);
  // Freed memory is returned (malloc_trim after large messages): RSS settles near where it was.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const int64_t rss_after = RssKb(daemon_->pid());
  std::printf("RSS before %lld KB, after %lld KB\n", static_cast<long long>(rss_before),
              static_cast<long long>(rss_after));
  EXPECT_LT(rss_after - rss_before, 200 * 1024)
      << "RSS grew from " << rss_before << " KB to " << rss_after << " KB";
  ExpectTrafficAnswered(traffic);
}

// Row 9: a NUL byte, trailing bytes and invalid UTF-8 are refused consistently.
TEST_F(HostileClientTest, NulTrailingBytesAndInvalidUtf8AreRefused) {
  auto c = Client();
  const std::vector<std::string> bad = {
      std::string(R"({"type":"ping","id":"n1"})") + std::string(1, '\0') + "\xff\xfe garbage",
      std::string(R"({"type":"ping","id":"n2"})") + std::string(1, '\0'),
      R"({"type":"ping","id":"n3"} trailing)",
      "{\"type\":\"ping\",\"id\":\"n4\",\"nonce\":\"\xff\xfe\"}",
      "{\"type\":\"ping\",\"id\":\"n5\",\"nonce\":\"\xc3\"}",
      "{\"type\":\"ping\",\"id\":\"n6\"}\xc3\xa9",
  };
  for (const std::string& header : bad) {
    const json h = Ask(*c, {"SIFT/1", header});
    EXPECT_EQ(h.value("code", ""), "INVALID_ARGUMENT") << h.dump();
    EXPECT_EQ(h.value("reason", ""), "bad_json") << h.dump();
  }
  const json ok = Ask(*c, {"SIFT/1", "{\"type\":\"ping\",\"nonce\":\"caf\xc3\xa9\"}  \n"});
  EXPECT_EQ(ok["type"], "pong");
  EXPECT_EQ(ok["nonce"], "caf\xc3\xa9");
}

// Row 5: a tiny positive temperature is refused with a clear error; the smallest allowed works.
TEST_F(HostileClientTest, TinyTemperaturesAreRefused) {
  auto c = Client();
  for (double t : {1e-39, 1e-30, 1e-10, 9.9e-4}) {
    json g = Generate("temp", "full");
    g["sampling"] = {{"temperature", t}, {"seed", 3}};
    c->Send(g);
    const json e = Terminal(*c, "temp");
    EXPECT_EQ(e["code"], "INVALID_ARGUMENT") << t << " " << e.dump();
    EXPECT_EQ(e["reason"], "bad_field");
    EXPECT_NE(e["message"].get<std::string>().find("0 (greedy) or a number in [0.001, 100]"),
              std::string::npos)
        << e.dump();
  }
  json g = Generate("temp-ok", "full", 4);
  g["sampling"] = {{"temperature", 1e-3}, {"seed", 3}};
  c->Send(g);
  EXPECT_EQ(Terminal(*c, "temp-ok")["type"], "final");
}

// Row 12: per-request overrides are capped; the pipeline's own values are not.
TEST_F(HostileClientTest, CostlyOverridesAreRefused) {
  auto c = Client();
  for (const auto& [key, value] : std::vector<std::pair<std::string, int>>{
           {"chunk_size", 1}, {"chunk_size", 63}, {"block_size", 1}}) {
    json g = Generate("cap", "full");
    g["params"] = {{"prefill", {{key, value}}}};
    c->Send(g);
    const json e = Terminal(*c, "cap");
    EXPECT_EQ(e["code"], "INVALID_ARGUMENT") << e.dump();
    EXPECT_NE(e["message"].get<std::string>().find("cost cap"), std::string::npos) << e.dump();
    EXPECT_NE(e["message"].get<std::string>().find(key), std::string::npos) << e.dump();
  }
  json g = Generate("cap-ok", "full");
  g["params"] = {{"prefill", {{"chunk_size", 64}, {"block_size", 64}}}};
  c->Send(g);
  EXPECT_EQ(Terminal(*c, "cap-ok")["type"], "final");
}

// Row 11: ILRe with a prompt too short to have context passes it through uncompressed.
TEST_F(HostileClientTest, IlreWithAShortPromptPassesThrough) {
  if (!fs::exists(Plugin("ilre")) || !fs::exists(Plugin("prefill_streaming"))) {
    GTEST_SKIP() << "ilre plugins not built";
  }
  auto c = Client();
  for (const json& input :
       {json{{"prompt", "Hello there"}}, json{{"context", "Short."}, {"question", "Is it short?"}},
        json{{"tokens", {1, 2, 3}}}}) {
    json g = Generate("short", "ilre");
    g.erase("prompt");
    g.update(input);
    c->Send(g);
    const json f = Terminal(*c, "short");
    ASSERT_EQ(f["type"], "final") << input.dump() << " " << f.dump();
    EXPECT_EQ(f["stats"]["tokens_kept"], f["stats"]["tokens_before"]);
  }
}

// Limit: admitted requests per connection (--max-client-inflight 4 here).
TEST_F(HostileClientTest, PerConnectionInflightLimit) {
  auto c = Client();
  for (int i = 0; i < 6; ++i) {
    json g = Generate("f" + std::to_string(i), "full", 40);
    g["ignore_eos"] = true;
    c->Send(g);
  }
  std::map<std::string, json> first;  // id -> first reply
  json h;
  while (first.size() < 6 && c->Recv(&h, 60000)) {
    if (h["type"] == "heartbeat" || h["type"] == "chunk") continue;
    first.emplace(h["id"].get<std::string>(), h);
  }
  int accepted = 0, refused = 0;
  for (const auto& [id, r] : first) {
    if (r["type"] == "accepted") ++accepted;
    if (r.value("reason", "") == "client_inflight_limit") {
      ++refused;
      EXPECT_EQ(r["code"], "RESOURCE_EXHAUSTED");
      EXPECT_EQ(r["retryable"], true);
    }
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(refused, 2);
  // Another connection is not affected.
  auto other = Client();
  other->Send(Generate("other", "full"));
  for (int i = 0; i < 6; ++i) c->Send({{"type", "cancel"}, {"id", "f" + std::to_string(i)}});
  EXPECT_EQ(Terminal(*other, "other")["type"], "final");
}

// Row 6: a routing id is not an identity. Clients may not choose one; a connection that
// presents another (vanished) connection's id receives nothing of that connection's stream.
TEST_F(HostileClientTest, RoutingIdsCannotBeChosenOrTakenOver) {
  const std::string endpoint = daemon_->endpoint();
  auto dealer = [&](const std::string& routing_id) {
    auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    if (!routing_id.empty()) s->set(zmq::sockopt::routing_id, routing_id);
    s->connect(endpoint);
    return s;
  };
  auto send = [](zmq::socket_t& s, const std::string& header) {
    s.send(zmq::buffer(std::string("SIFT/1")), zmq::send_flags::sndmore);
    s.send(zmq::buffer(header), zmq::send_flags::none);
  };
  auto recv = [](zmq::socket_t& s, int timeout_ms, json* h) {
    zmq::pollitem_t item = {s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return false;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(s, std::back_inserter(frames));
    *h = frames.size() >= 2 ? json::parse(frames[1].to_string(), nullptr, false) : json();
    return true;
  };

  // A client that sets its own routing id is refused, clearly.
  auto chooser = dealer("alice");
  send(*chooser, R"({"type":"ping","id":"c1"})");
  json h;
  ASSERT_TRUE(recv(*chooser, 30000, &h));
  EXPECT_EQ(h["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(h["reason"], "routing_id_not_allowed");
  EXPECT_EQ(h["id"], "c1");

  // The owner (an id the daemon's socket assigned) starts a long stream. A malformed message
  // first makes the daemon log the owner's routing id ("client", hex), as an observer could
  // learn it.
  auto owner = dealer("");
  send(*owner, R"({"type":"ping","id":"spy")");
  ASSERT_TRUE(recv(*owner, 30000, &h));
  std::istringstream log(daemon_->log());
  const std::regex client("\"client\":\"([0-9a-f]+)\"");
  std::string hex, line;
  while (std::getline(log, line)) {
    std::smatch m;
    if (line.find("\"event\":\"bad_message\"") != std::string::npos &&
        std::regex_search(line, m, client)) {
      hex = m[1];
    }
  }
  ASSERT_EQ(hex.size(), 10u) << "the owner's routing id is not in the log";
  std::string owner_id;
  for (size_t i = 0; i < hex.size(); i += 2) {
    owner_id.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  json stream = Generate("stream", "full", 200);
  stream["ignore_eos"] = true;
  send(*owner, stream.dump());
  // While the owner is connected, a connection presenting its id is held back by ZeroMQ (it is
  // never attached, so nothing can be sent to it either way) and takes nothing.
  auto parked = dealer(owner_id);
  send(*parked, R"({"type":"ping","id":"imp1"})");
  int owner_chunks = 0;
  while (owner_chunks < 3 && recv(*owner, 30000, &h)) owner_chunks += h["type"] == "chunk";
  ASSERT_EQ(owner_chunks, 3) << "the owner's stream stopped";
  EXPECT_FALSE(recv(*parked, 300, &h)) << h.dump();
  // The owner vanishes mid-stream; the daemon notices at once and cancels its request.
  parked.reset();
  owner.reset();
  auto cancelled = [&] {
    std::istringstream lines(daemon_->log());
    for (std::string l; std::getline(lines, l);) {
      if (l.find("\"event\":\"request_done\"") != std::string::npos &&
          l.find("\"client\":\"" + hex + "\"") != std::string::npos &&
          l.find("\"outcome\":\"client_gone\"") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (!cancelled() && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(cancelled());
  // An impostor now connects with the owner's id: it receives none of the rest of the owner's
  // stream, only the refusal of its own messages.
  auto impostor = dealer(owner_id);
  std::vector<json> got;
  while (recv(*impostor, 1000, &h)) got.push_back(h);
  send(*impostor, R"({"type":"ping","id":"imp2"})");
  while (recv(*impostor, 1500, &h)) got.push_back(h);
  for (const json& r : got) {
    EXPECT_NE(r.value("id", json()), json("stream")) << "the impostor received " << r.dump();
  }
  ASSERT_FALSE(got.empty()) << "the impostor was not told why it is refused";
  EXPECT_EQ(got.back().value("reason", ""), "routing_id_not_allowed") << got.back().dump();
  EXPECT_EQ(got.back().value("id", ""), "imp2");
  EXPECT_TRUE(Pong(ctx_, *daemon_));
}

// ---- own daemons: plugin files (rows 2, 3, 10, 13), start-up, workers, ipc ----

// A plugins folder of copies (prefill_full, decode_local, keep_recent) and a pipelines folder
// (full, recent), rescanned on SIGHUP only, with a short pre-flight timeout.
class PluginFolder {
 public:
  PluginFolder() {
    fs::create_directories(plugins());
    fs::create_directories(pipelines());
    for (const char* p : {"prefill_full", "decode_local", "keep_recent"}) {
      fs::copy_file(Plugin(p), plugins() + "/" + p + ".so");
    }
    for (const char* p : {"full", "recent"}) {
      fs::copy_file(Pipeline(p), pipelines() + "/" + p + ".toml");
    }
  }
  std::string plugins() const { return dir_.File("plugins"); }
  std::string pipelines() const { return dir_.File("pipelines"); }
  std::vector<std::string> Flags() const {
    return {"--plugins",
            plugins(),
            "--pipelines",
            pipelines(),
            "--rescan-ms",
            "0",
            "--preflight-timeout-ms",
            "3000"};
  }

 private:
  sift::testing::TempDir dir_;
};

json List(zmq::context_t& ctx, const Daemon& d) {
  auto c = Connect(ctx, d);
  c->Send({{"type", "list"}});
  json h;
  return c->Recv(&h, 30000) ? h : json();
}

json PluginEntry(const json& list, const std::string& file_name) {
  for (const json& p : list.value("plugins", json::array())) {
    if (fs::path(p.value("file", "")).filename() == file_name) return p;
  }
  return json();
}

// SIGHUP, then waits for the rescan's log line.
void Rescan(Daemon& d) {
  const size_t before = Count(d.log(), "\"event\":\"rescan_done\"");
  ::kill(d.pid(), SIGHUP);
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Count(d.log(), "\"event\":\"rescan_done\"") == before && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Rows 2, 3, 10, 13: bad plugin files are refused by the pre-flight child; siftd never maps
// them, keeps serving the previous versions, and everyone's requests are answered.
TEST(PluginFilesTest, BadPluginFilesAreRefusedAndTheDaemonKeepsServing) {
  REQUIRE_MODEL();
  PluginFolder folder;
  Daemon d;
  ASSERT_EQ(d.Start(folder.Flags()), "");
  zmq::context_t ctx(1);
  Traffic traffic(d, {"recent", "full"});
  const std::string served = folder.plugins() + "/keep_recent.so";
  const std::string good = Bytes(Plugin("keep_recent"));
  const uint64_t generation = List(ctx, d)["generation"].get<uint64_t>();

  struct Case {
    std::string label, bytes, file, expect;
  };
  std::vector<Case> cases;
  for (size_t offset : {size_t{64} << 10, size_t{16} << 10, size_t{4} << 10, size_t{1} << 10,
                        good.size() / 2, good.size() - 64}) {
    if (offset < good.size()) {
      cases.push_back(
          {"truncated at " + std::to_string(offset), good.substr(0, offset), "keep_recent.so", ""});
    }
  }
  cases.push_back({"abort() in a static constructor", Bytes(Fixture("aborts_on_load")),
                   "aborts_on_load.so", "SIGABRT"});
  cases.push_back({"hangs while loading", Bytes(Fixture("hangs_on_load")), "hangs_on_load.so",
                   "no answer within 3000 ms"});
  cases.push_back({"crashes in its factory", Bytes(Fixture("crashes_in_factory")),
                   "crashes_in_factory.so", "SIGSEGV"});
  cases.push_back({"another plugin's bytes", Bytes(Plugin("prefill_full")), "keep_recent.so",
                   "its descriptor names plugin 'prefill_full' but the file is named "
                   "keep_recent.so"});
  cases.push_back({"not a library", std::string(5000, 'x'), "garbage.so", "invalid ELF header"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const size_t rejected = Count(d.log(), "\"event\":\"plugin_rejected\"");
    Install(folder.plugins() + "/" + c.file, c.bytes);
    Rescan(d);
    ASSERT_GT(d.pid(), 0) << "siftd died:\n" << d.log();
    EXPECT_EQ(Count(d.log(), "\"event\":\"plugin_rejected\""), rejected + 1) << d.log();
    const json entry = PluginEntry(List(ctx, d), c.file);
    EXPECT_EQ(entry.value("ok", true), false) << entry.dump();
    const std::string error = entry.value("error", "");
    // The file by name, never where the operator keeps it (listings carry no paths).
    EXPECT_NE(error.find(c.file), std::string::npos) << error;
    EXPECT_EQ(error.find(folder.plugins()), std::string::npos) << error;
    EXPECT_NE(error.find(c.expect), std::string::npos) << error;
    EXPECT_EQ(error.find("No such file or directory"), std::string::npos) << error;
    if (c.file == "keep_recent.so") {
      // The previous version keeps serving under its own name; prefill_full is untouched.
      EXPECT_EQ(entry.value("name", ""), "keep_recent") << entry.dump();
      EXPECT_EQ(entry.value("version", ""), "1.0.0") << entry.dump();
      EXPECT_EQ(PluginEntry(List(ctx, d), "prefill_full.so").value("ok", false), true);
      auto client = Connect(ctx, d);
      client->Send(Generate("during-" + c.label, "recent"));
      const json f = Terminal(*client, "during-" + c.label);
      EXPECT_EQ(f["type"], "final") << f.dump();
      ASSERT_GE(f["stats"]["stages"].size(), 2u);
      EXPECT_EQ(f["stats"]["stages"][1]["plugin"], "keep_recent@1.0.0");
      EXPECT_EQ(f["stats"]["stages"][0]["plugin"].get<std::string>().rfind("prefill_full@", 0), 0u);
    } else {
      fs::remove(folder.plugins() + "/" + c.file);
    }
  }
  // The good file again: loaded as a new generation of keep_recent.
  Install(served, good);
  Rescan(d);
  // Row 13: rescans without changes do not raise the catalog generation...
  const uint64_t settled = List(ctx, d)["generation"].get<uint64_t>();
  Rescan(d);
  Rescan(d);
  EXPECT_EQ(List(ctx, d)["generation"].get<uint64_t>(), settled);
  EXPECT_GT(settled, generation);
  // ...and no staged copy of a rejected file is left behind: prefill_full, decode_local and
  // the two loaded generations of keep_recent (libraries stay mapped, so their copies stay).
  std::map<std::string, int> staged;
  for (const auto& e : fs::directory_iterator(d.staging())) {
    const std::string name = e.path().filename().string();
    ++staged[name.substr(0, name.find('.'))];
  }
  EXPECT_EQ(staged, (std::map<std::string, int>{
                        {"decode_local", 1}, {"keep_recent", 2}, {"prefill_full", 1}}));
  ExpectTrafficAnswered(traffic);
  EXPECT_EQ(d.Stop(SIGTERM), 0) << d.log();
}

// Start-up with bad files among the good ones serves everything else.
TEST(PluginFilesTest, StartupWithBadFilesServesEverythingElse) {
  REQUIRE_MODEL();
  PluginFolder folder;
  const std::string good = Bytes(Plugin("keep_recent"));
  Install(folder.plugins() + "/keep_recent.so", good.substr(0, 64 << 10));
  fs::copy_file(Fixture("aborts_on_load"), folder.plugins() + "/aborts_on_load.so");
  fs::copy_file(Fixture("crashes_in_factory"), folder.plugins() + "/crashes_in_factory.so");
  Install(folder.plugins() + "/garbage.so", "not a library");
  Daemon d;
  ASSERT_EQ(d.Start(folder.Flags()), "");
  zmq::context_t ctx(1);
  auto c = Connect(ctx, d);
  c->Send(Generate("s", "full"));
  EXPECT_EQ(Terminal(*c, "s")["type"], "final");
  c->Send(Generate("r", "recent"));
  const json e = Terminal(*c, "r");
  EXPECT_EQ(e["code"], "NOT_FOUND") << e.dump();  // its plugin never loaded
  const json list = List(ctx, d);
  for (const char* f :
       {"keep_recent.so", "aborts_on_load.so", "crashes_in_factory.so", "garbage.so"}) {
    EXPECT_EQ(PluginEntry(list, f).value("ok", true), false) << f;
  }
  EXPECT_EQ(PluginEntry(list, "prefill_full.so").value("ok", false), true);
  EXPECT_NE(d.log().find("killed by SIGABRT"), std::string::npos);
  // A good file put in place later is picked up.
  Install(folder.plugins() + "/keep_recent.so", good);
  Rescan(d);
  c->Send(Generate("r2", "recent"));
  EXPECT_EQ(Terminal(*c, "r2")["type"], "final");
}

// Row 7: the worker port has no authentication, so it binds loopback only.
TEST(WorkerTest, WorkerRefusesNonLoopbackBind) {
  const std::string cmd = std::string(SIFT_BINARY_DIR) +
                          "/bin/siftd --worker --bind tcp://0.0.0.0:0 --model /nonexistent 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("\"event\":\"insecure_bind\""), std::string::npos) << out;
  EXPECT_EQ(out.find("model_loaded"), std::string::npos) << out;
}

// Row 8: a pipeline whose remote worker is dead fails fast and does not hold the inference
// worker: connect timeout, then an open circuit.
TEST(WorkerTest, DeadRemoteWorkerFailsFast) {
  REQUIRE_MODEL();
  PluginFolder folder;
  std::ofstream(folder.pipelines() + "/remote.toml")
      << "name = \"remote\"\n[[stage]]\nplugin = \"prefill_full\"\n[[stage]]\nname = "
         "\"decode\"\nplugin = \"decode_local\"\nendpoint = \"tcp://127.0.0.1:"
      << DeadPort() << "\"\n";
  Daemon d;
  ASSERT_EQ(d.Start(folder.Flags()), "");
  zmq::context_t ctx(1);
  Traffic traffic(d, {"full"});
  auto c = Connect(ctx, d);
  c->Send(Generate("dead1", "remote"));
  json e = Terminal(*c, "dead1");
  EXPECT_EQ(e["code"], "UNAVAILABLE") << e.dump();
  EXPECT_EQ(e["reason"], "worker_unavailable") << e.dump();
  EXPECT_NE(e["message"].get<std::string>().find("cannot connect within 1000 ms"),
            std::string::npos)
      << e.dump();
  // Three more at once: while the endpoint's circuit is open they fail without waiting (one
  // of them may be the probe after the 1 s back-off, which opens the circuit for 2 s).
  for (int i = 0; i < 3; ++i) c->Send(Generate("dead" + std::to_string(i + 2), "remote"));
  int open = 0;
  for (auto& [id, terminal] : Terminals(*c, {"dead2", "dead3", "dead4"})) {
    e = terminal;
    EXPECT_EQ(e["code"], "UNAVAILABLE") << e.dump();
    EXPECT_EQ(e["reason"], "worker_unavailable") << e.dump();
    open += e["message"].get<std::string>().find("circuit open") != std::string::npos;
  }
  EXPECT_GE(open, 2);
  ExpectTrafficAnswered(traffic);
}

// Row 13: the ipc socket file is removed on a clean exit.
TEST(LifecycleTest, IpcSocketFileIsRemovedOnCleanExit) {
  REQUIRE_MODEL();
  sift::testing::TempDir dir;
  const std::string sock = dir.File("siftd.sock");
  Daemon d;
  ASSERT_EQ(d.Start({"--bind", "ipc://" + sock, "--pipelines", dir.path()}), "");
  EXPECT_TRUE(fs::exists(sock));
  EXPECT_EQ(d.Stop(SIGTERM), 0) << d.log();
  EXPECT_FALSE(fs::exists(sock));
}

}  // namespace
