#include "daemon/ops_http.h"

#include <sstream>

#include "daemon/listen_address.h"
#include "daemon/log.h"

namespace sift::daemon {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kConnectionTimeoutMs = 5000;

const char* StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

}  // namespace

class OpsHttpServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Handler& handler)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), handler_(handler) {}

  void Start() {
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::milliseconds(kConnectionTimeoutMs));
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    asio::async_read_until(
        socket_, asio::dynamic_buffer(request_, kMaxRequestBytes), "\r\n\r\n",
        [self](const boost::system::error_code& ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(const boost::system::error_code& ec) {
    HttpResponse response;
    std::string method, target;
    if (ec) {
      if (ec != asio::error::not_found) {  // not_found: the 8 KiB limit
        timer_.cancel();
        return;
      }
      response = {400, "text/plain; charset=utf-8", "request too large\n"};
    } else {
      std::istringstream line(request_.substr(0, request_.find("\r\n")));
      line >> method >> target;
      const size_t query = target.find('?');
      if (query != std::string::npos) target.resize(query);
      if (method != "GET" && method != "HEAD") {
        response = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
      } else {
        try {
          response = handler_(method, target);
        } catch (const std::exception& e) {
          response = {500, "text/plain; charset=utf-8", std::string(e.what()) + "\n"};
        }
      }
    }
    std::ostringstream head;
    head << "HTTP/1.1 " << response.status << " " << StatusText(response.status) << "\r\n"
         << "Content-Type: " << response.content_type << "\r\n"
         << "Content-Length: " << response.body.size() << "\r\n"
         << "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
    reply_ = head.str();
    if (method != "HEAD") reply_ += response.body;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(reply_),
                      [self](const boost::system::error_code&, size_t) {
                        boost::system::error_code ignored;
                        self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                        self->socket_.close(ignored);
                        self->timer_.cancel();
                      });
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  const Handler& handler_;
  std::string request_;
  std::string reply_;
};

OpsHttpServer::OpsHttpServer(asio::io_context& io, Handler handler)
    : io_(io), handler_(std::move(handler)), acceptor_(io) {}

OpsHttpServer::~OpsHttpServer() { Stop(); }

Status OpsHttpServer::Listen(const std::string& host_port) {
  tcp::endpoint endpoint;
  SIFT_RETURN_IF_ERROR(ParseListenAddress(host_port, "--http", "bad_http_address", &endpoint));
  if (!endpoint.address().is_loopback()) {
    return Status(StatusCode::kInvalidArgument, "bad_http_address",
                  "--http must be a loopback address (127.0.0.1, ::1), got '" + host_port + "'");
  }
  boost::system::error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kUnavailable, "http_bind_failed",
                  "cannot listen on " + host_port + ": " + ec.message());
  }
  Accept();
  return Status::Ok();
}

std::string OpsHttpServer::address() const {
  boost::system::error_code ec;
  const tcp::endpoint e = acceptor_.local_endpoint(ec);
  if (ec) return "";
  const std::string host =
      e.address().is_v6() ? "[" + e.address().to_string() + "]" : e.address().to_string();
  return host + ":" + std::to_string(e.port());
}

void OpsHttpServer::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

void OpsHttpServer::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) std::make_shared<Session>(std::move(socket), handler_)->Start();
    Accept();
  });
}

}  // namespace sift::daemon
