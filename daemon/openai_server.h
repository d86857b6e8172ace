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
// Content-Length before the body is read), JSON nesting <= 64; a request's header and its
// body must each arrive within timeout_ms, every write must finish within it, an idle
// keep-alive connection is closed after it; at most max_connections connections (more get
// 503). All sockets are served asynchronously by one thread: no thread per connection.
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
  int timeout_ms = 30000;
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
