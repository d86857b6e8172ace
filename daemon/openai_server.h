// OpenAiServer: the OpenAI-compatible HTTP/1.1 port of siftd (Boost.Beast over Boost.Asio;
// docs/openai.md), beside the SIFT/1 ZeroMQ port, which stays the primary interface.
//
//   POST /v1/chat/completions, POST /v1/completions   (stream: server-sent events)
//   GET  /v1/models, GET /v1/models/{pipeline}
//
// It owns no queue: every completion is translated (openai_request.h) and handed to the
// FrontEnd as an ExternalClient, so it shares the admission queue, workers, deadlines,
// metrics, request log and drain with ZeroMQ clients. A client that disconnects (or stops
// reading for longer than the I/O timeout) has its request cancelled as `client_gone`.
//
// Limits: header <= 16 KiB (431), body <= max_body_bytes (413, checked against
// Content-Length before the body is read), JSON nesting <= 64. Idle connections are closed
// sooner than busy ones: a request's header must be complete within idle_timeout_ms of the
// connection opening or of the previous response (so the API key, checked as soon as the
// header is read, is checked within it), its body within timeout_ms, every write within
// timeout_ms. At most max_connections connections in all and max_connections_per_peer from
// one IP address (more get 503 and are closed at once; they take no slot). All sockets are
// served asynchronously by one thread: no thread per connection.
//
// Half-close: a client may shut down its sending side after a complete request (HTTP/1.1
// allows it; `nc -N`): the request runs and is answered, then the connection is closed. As a
// half-close and a close look alike until something is written, a non-streamed request whose
// client sent its FIN is probed with one TCP urgent byte (invisible to a reader that has not
// asked for urgent data inline); a closed client answers it with a reset, which is looked for
// every 200 ms, and the request is cancelled as `client_gone`. Streams find out from their own
// writes.
//
// Security: a non-loopback address needs API keys (Authorization: Bearer, api_keys.h), like
// the CURVE rule of the ZeroMQ port; with keys every request needs one, on any address.
//
// THREADING: Start/Stop/address from the owner's thread; everything else runs on the server's
//            own thread. The FrontEnd and Backend must outlive the server.
// ERRORS:    CheckOptions/Start return a Status (bad address, no keys for a non-loopback
//            address, unreadable key file, port in use).
#ifndef SIFT_DAEMON_OPENAI_SERVER_H_
#define SIFT_DAEMON_OPENAI_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/backend.h"
#include "daemon/front_end.h"
#include "daemon/metrics.h"
#include "sift/status.h"

namespace sift::daemon {

class OpenAiServerImpl;

struct OpenAiServerOptions {
  std::string address;  // host:port ("[::1]:8080" for IPv6) or a port (loopback); 0 = any free
  std::string api_keys_file;  // required for a non-loopback host; "" = no keys
  int64_t max_body_bytes = 16 << 20;
  int max_connections = 512;
  int max_connections_per_peer = 16;  // per client IP address
  int timeout_ms = 30000;             // a body's arrival, each write
  int idle_timeout_ms = 5000;         // a header's arrival (new and keep-alive connections)
  // GET /health on this port, for load balancers that reach only it (no API key needed): the
  // HTTP status (200 ready, 503 otherwise) and the status word ("ready", "draining", ...), the
  // same as the operations port's /health. Null: /health is not routed here. Called on the
  // connection's I/O thread; must be thread-safe.
  std::function<std::pair<int, std::string>()> health;
  // GET /metrics on this port (behind the API keys like every other path but /health), for
  // gateways and scrapers that reach only it: the operations port's Prometheus text. Null: not
  // routed here. Called on the connection's I/O thread; must be thread-safe.
  std::function<std::string()> metrics;
};

class OpenAiServer {
 public:
  OpenAiServer(OpenAiServerOptions options, FrontEnd& front_end, Backend& backend,
               Metrics& metrics);
  ~OpenAiServer();  // Stop(0)
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // The checks Start makes before binding (address syntax, the loopback rule, the key file),
  // for failing early at start-up.
  static Status CheckOptions(const OpenAiServerOptions& options);
  // Binds and starts the server thread.
  Status Start();
  // "host:port" once listening (the actual port when 0 was asked).
  std::string address() const;
  // Stops accepting, lets responses in progress finish for up to `grace_ms`, then closes every
  // connection and joins the thread. Call after the FrontEnd has stopped (its last replies
  // are then already queued here).
  void Stop(int grace_ms);

 private:
  std::unique_ptr<OpenAiServerImpl> impl_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_OPENAI_SERVER_H_
