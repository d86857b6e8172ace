// SiftClient: a minimal C++ client of the siftd protocol (docs/protocol.md) over a ZeroMQ
// DEALER socket, shared by the `sift` command-line tool, the load test and the daemon tests.
//
// Send() writes [SIFT/1][header][blobs...]; Recv() returns the next reply's header (any
// request's: callers match on "id"). Several requests may be in flight on one client.
//
// THREADING: one client per thread (ZeroMQ sockets are not thread-safe); the context may be
//            shared.
// ERRORS:    the constructor throws zmq::error_t on a bad endpoint; Send throws
//            std::runtime_error when no connection takes the message within send_timeout_ms
//            (the server refused this client's CURVE handshake: the socket then has no
//            connection and never makes another); Recv returns false on timeout, when a signal
//            interrupts the wait (EINTR: the caller checks its flag) or, at once, when the
//            server refused the handshake (ConnectionFailed), and a header with type
//            "client_error" for a reply that is not SIFT/1. ConnectionProblem() says why no
//            reply came where the socket knows (a refused key, another security mechanism, a
//            connection closed during the handshake).
#ifndef SIFT_TOOLS_SIFT_CLI_CLIENT_H_
#define SIFT_TOOLS_SIFT_CLI_CLIENT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace sift::client {

struct ClientOptions {
  std::string endpoint = "tcp://127.0.0.1:7700";
  // CURVE (all three or none): the server's public key and this client's key pair (Z85).
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
  int hwm = 10000;
  int linger_ms = 0;
  // A message waits for a connection this long at most. While the server is unreachable the
  // socket queues (up to hwm) and Send returns at once; only a refused handshake leaves
  // nothing to queue on, where a send would otherwise block forever.
  int send_timeout_ms = 5000;
};

class SiftClient {
 public:
  SiftClient(zmq::context_t& context, const ClientOptions& options);
  ~SiftClient();
  SiftClient(const SiftClient&) = delete;
  SiftClient& operator=(const SiftClient&) = delete;

  void Send(const nlohmann::json& header, const std::vector<std::string>& blobs = {});
  // Sends raw frames as given (tests of malformed input).
  void SendRaw(const std::vector<std::string>& frames);
  bool Recv(nlohmann::json* header, int timeout_ms);

  // Why the handshake with the server failed, in words for a user ("" when it has not failed
  // so far); the first failure is kept.
  std::string ConnectionProblem();
  // True once the server refused the handshake for good (a refused key, another security
  // mechanism): no reply can come. A connection closed during the handshake is retried and
  // only reported by ConnectionProblem().
  bool ConnectionFailed();

  zmq::socket_t& socket() { return socket_; }

 private:
  void ReadMonitor();  // takes the monitor's events without waiting

  zmq::socket_t socket_;
  zmq::socket_t monitor_;  // PAIR: socket_'s handshake failures (zmq_socket_monitor)
  std::string endpoint_;
  int send_timeout_ms_;
  std::string problem_;  // the first handshake failure, in words
  bool failed_ = false;  // the server refused the handshake for good
};

// Reads a CURVE key: the argument itself if it is a 40-character Z85 key, else the first
// non-comment line of the file it names. Throws std::runtime_error.
std::string ReadKey(const std::string& file_or_key);
// The Z85 public key of a Z85 secret key. Throws std::runtime_error.
std::string PublicKeyOf(const std::string& secret_key);

}  // namespace sift::client

#endif  // SIFT_TOOLS_SIFT_CLI_CLIENT_H_
