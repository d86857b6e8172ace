#include "client.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <zmq_addon.hpp>

namespace sift::client {

namespace {
constexpr char kMagic[] = "SIFT/1";
constexpr int kFailureEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

std::string Hex(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", value);
  return buf;
}
}  // namespace

SiftClient::SiftClient(zmq::context_t& context, const ClientOptions& options)
    : socket_(context, zmq::socket_type::dealer),
      monitor_(context, zmq::socket_type::pair),
      endpoint_(options.endpoint),
      send_timeout_ms_(options.send_timeout_ms) {
  // Before connecting, so that no handshake goes unobserved.
  static std::atomic<uint64_t> next_monitor{0};
  const std::string monitor = "inproc://sift-client-monitor-" + std::to_string(next_monitor++);
  if (zmq_socket_monitor(socket_.handle(), monitor.c_str(), kFailureEvents) != 0) {
    throw zmq::error_t();
  }
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(monitor);
  socket_.set(zmq::sockopt::linger, options.linger_ms);
  socket_.set(zmq::sockopt::sndtimeo, options.send_timeout_ms);
  socket_.set(zmq::sockopt::sndhwm, options.hwm);
  socket_.set(zmq::sockopt::rcvhwm, options.hwm);
  if (!options.server_public_key.empty()) {
    socket_.set(zmq::sockopt::curve_serverkey, options.server_public_key);
    socket_.set(zmq::sockopt::curve_publickey, options.public_key);
    socket_.set(zmq::sockopt::curve_secretkey, options.secret_key);
  }
  socket_.connect(options.endpoint);
}

SiftClient::~SiftClient() { zmq_socket_monitor(socket_.handle(), nullptr, 0); }

void SiftClient::Send(const nlohmann::json& header, const std::vector<std::string>& blobs) {
  std::vector<std::string> frames = {kMagic, header.dump()};
  frames.insert(frames.end(), blobs.begin(), blobs.end());
  SendRaw(frames);
}

void SiftClient::SendRaw(const std::vector<std::string>& frames) {
  std::vector<zmq::const_buffer> buffers;
  for (const std::string& f : frames) buffers.push_back(zmq::buffer(f));
  if (!zmq::send_multipart(socket_, buffers)) {
    const std::string why = ConnectionProblem();
    throw std::runtime_error("cannot send to " + endpoint_ + ": " +
                             (why.empty() ? "no connection took the message in " +
                                                std::to_string(send_timeout_ms_) +
                                                " ms (did the server refuse this client's CURVE "
                                                "keys?)"
                                          : why));
  }
}

bool SiftClient::Recv(nlohmann::json* header, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(std::max<int64_t>(left, 0)));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return false;  // a signal: the caller looks at why (Ctrl-C)
      throw;
    }
    if (items[1].revents & ZMQ_POLLIN) ReadMonitor();
    if (items[0].revents & ZMQ_POLLIN) break;
    if (failed_ || Clock::now() >= end) return false;
  }
  std::vector<zmq::message_t> frames;
  if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
    return false;
  }
  if (frames.size() < 2 || frames[0].to_string_view() != kMagic) {
    *header = {{"type", "client_error"}, {"message", "reply is not SIFT/1"}};
    return true;
  }
  *header = nlohmann::json::parse(frames[1].to_string_view(), nullptr, false);
  if (header->is_discarded() || !header->is_object()) {
    *header = {{"type", "client_error"}, {"message", "reply header is not a JSON object"}};
  }
  return true;
}

std::string SiftClient::ConnectionProblem() {
  ReadMonitor();
  return problem_;
}

bool SiftClient::ConnectionFailed() {
  ReadMonitor();
  return failed_;
}

void SiftClient::ReadMonitor() {
  for (;;) {
    // Each event: [uint16 event, uint32 value] then the endpoint.
    zmq::message_t event, address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof(value));
    std::string why;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      why = "the server refused this client's key (CURVE authentication failed, status " +
            std::to_string(value) + ")";
    } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      why = value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                ? "the server and this client use different security (CURVE on one side only?)"
            : value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                ? "the CURVE handshake failed (a wrong server public key?)"
                : "the handshake failed (ZeroMQ protocol error " + Hex(value) + ")";
    } else {
      why =
          "the server closed the connection during the handshake (a wrong server public key, "
          "or security settings that differ?)";
    }
    const bool final = id != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;  // the others end the session
    if (problem_.empty() || (final && !failed_)) problem_ = why;
    failed_ = failed_ || final;
  }
}

std::string ReadKey(const std::string& file_or_key) {
  auto valid = [](const std::string& k) {
    uint8_t bytes[32];
    return k.size() == 40 && zmq_z85_decode(bytes, k.c_str()) != nullptr;
  };
  if (valid(file_or_key)) return file_or_key;
  std::ifstream in(file_or_key);
  if (!in) throw std::runtime_error("cannot read key file " + file_or_key);
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
    if (!valid(line)) break;
    return line;
  }
  throw std::runtime_error(file_or_key + ": expected a 40-character Z85 key");
}

std::string PublicKeyOf(const std::string& secret_key) {
  char pub[41];
  if (zmq_curve_public(pub, secret_key.c_str()) != 0) {
    throw std::runtime_error("not a valid CURVE secret key");
  }
  return pub;
}

}  // namespace sift::client
