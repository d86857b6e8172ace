#include "client.h"

#include <fstream>
#include <stdexcept>
#include <string>
#include <zmq_addon.hpp>

namespace sift::client {

namespace {
constexpr char kMagic[] = "SIFT/1";
}  // namespace

SiftClient::SiftClient(zmq::context_t& context, const ClientOptions& options)
    : socket_(context, zmq::socket_type::dealer),
      endpoint_(options.endpoint),
      send_timeout_ms_(options.send_timeout_ms) {
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

void SiftClient::Send(const nlohmann::json& header, const std::vector<std::string>& blobs) {
  std::vector<std::string> frames = {kMagic, header.dump()};
  frames.insert(frames.end(), blobs.begin(), blobs.end());
  SendRaw(frames);
}

void SiftClient::SendRaw(const std::vector<std::string>& frames) {
  std::vector<zmq::const_buffer> buffers;
  for (const std::string& f : frames) buffers.push_back(zmq::buffer(f));
  if (!zmq::send_multipart(socket_, buffers)) {
    throw std::runtime_error(
        "cannot send to " + endpoint_ + ": no connection took the message in " +
        std::to_string(send_timeout_ms_) + " ms (did the server refuse this client's CURVE keys?)");
  }
}

bool SiftClient::Recv(nlohmann::json* header, int timeout_ms) {
  zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return false;
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
