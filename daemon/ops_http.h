// OpsHttpServer: the operations port, a minimal HTTP/1.1 server on loopback (Boost.Asio).
//
// It serves GET (and HEAD) requests through one handler (siftd routes /health, /health/live,
// /health/ready and /metrics) and closes the connection after each response. Requests are
// limited to 8 KiB of headers and 5 s per connection, so a stuck client cannot pin it.
//
// THREADING: all work runs on the io_context's thread(s); Listen/Stop are called from any
//            thread before run() / via post. The handler runs on the io_context thread.
// ERRORS:    Listen returns a Status (non-loopback address, bad address, port in use).
#ifndef SIFT_DAEMON_OPS_HTTP_H_
#define SIFT_DAEMON_OPS_HTTP_H_

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sift/status.h"

namespace sift::daemon {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class OpsHttpServer {
 public:
  using Handler = std::function<HttpResponse(const std::string& method, const std::string& path)>;

  OpsHttpServer(boost::asio::io_context& io, Handler handler);
  ~OpsHttpServer();

  // A loopback address (listen_address.h: "127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT" or a
  // bare PORT); port 0 picks a free one.
  Status Listen(const std::string& host_port);
  // "127.0.0.1:PORT" once listening.
  std::string address() const;
  void Stop();

 private:
  class Session;
  void Accept();

  boost::asio::io_context& io_;
  Handler handler_;
  boost::asio::ip::tcp::acceptor acceptor_;
};

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_OPS_HTTP_H_
