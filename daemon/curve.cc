#include "daemon/curve.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>
#include <zmq_addon.hpp>

#include "daemon/log.h"

namespace sift::daemon {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool ValidZ85Key(const std::string& key) {
  if (key.size() != 40) return false;
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, key.c_str()) != nullptr;
}

Status ReadLines(const std::string& file, std::vector<std::string>* lines) {
  std::ifstream in(file);
  if (!in) return Status(StatusCode::kNotFound, "curve_key_file", file + ": cannot open");
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    lines->push_back(line);
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return Status(StatusCode::kInternal, "curve_key_file", path + ": cannot write");
  ::chmod(tmp.c_str(), mode);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(StatusCode::kInternal, "curve_key_file", path + ": write failed");
  }
  return Status::Ok();
}

}  // namespace

bool IsLoopbackEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string rest = endpoint.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = rest.substr(0, colon);
  if (host == "localhost" || host == "[::1]") return true;
  // 127.0.0.0/8, as a literal dotted quad.
  unsigned a, b, c, d;
  char extra;
  if (std::sscanf(host.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4) {
    return a == 127 && b < 256 && c < 256 && d < 256;
  }
  return false;
}

Status ReadZ85Key(const std::string& file_or_key, std::string* key) {
  if (ValidZ85Key(file_or_key)) {
    *key = file_or_key;
    return Status::Ok();
  }
  std::vector<std::string> lines;
  SIFT_RETURN_IF_ERROR(ReadLines(file_or_key, &lines));
  if (lines.empty() || !ValidZ85Key(lines[0])) {
    return Status(StatusCode::kInvalidArgument, "curve_key_file",
                  file_or_key + ": expected a 40-character Z85 key on the first line");
  }
  *key = lines[0];
  return Status::Ok();
}

Status LoadCurveConfig(const std::string& secret_key_file, const std::string& client_keys_file,
                       CurveConfig* config) {
  *config = CurveConfig();
  if (!zmq_has("curve")) {
    return Status(StatusCode::kFailedPrecondition, "curve_unavailable",
                  "this libzmq was built without CURVE support");
  }
  if (secret_key_file.empty() || client_keys_file.empty()) {
    return Status(StatusCode::kInvalidArgument, "curve_config",
                  "CURVE needs both --curve-secret-key and --curve-client-keys");
  }
  SIFT_RETURN_IF_ERROR(ReadZ85Key(secret_key_file, &config->server_secret));
  char pub[41];
  if (zmq_curve_public(pub, config->server_secret.c_str()) != 0) {
    return Status(StatusCode::kInvalidArgument, "curve_key_file",
                  secret_key_file + ": not a valid secret key");
  }
  config->server_public = pub;
  std::vector<std::string> lines;
  SIFT_RETURN_IF_ERROR(ReadLines(client_keys_file, &lines));
  for (size_t i = 0; i < lines.size(); ++i) {
    // Accept "KEY" or "KEY  comment".
    std::string key = lines[i].substr(0, lines[i].find_first_of(" \t"));
    if (!ValidZ85Key(key)) {
      return Status(StatusCode::kInvalidArgument, "curve_key_file",
                    client_keys_file + ": entry " + std::to_string(i + 1) +
                        " is not a 40-character Z85 public key");
    }
    config->client_keys.insert(key);
  }
  if (config->client_keys.empty()) {
    return Status(StatusCode::kInvalidArgument, "curve_key_file",
                  client_keys_file + ": no client keys");
  }
  config->enabled = true;
  return Status::Ok();
}

Status MakeCurveKeyFiles(const std::string& prefix, std::string* summary) {
  if (!zmq_has("curve")) {
    return Status(StatusCode::kFailedPrecondition, "curve_unavailable",
                  "this libzmq was built without CURVE support");
  }
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status(StatusCode::kInternal, "curve_keygen", "zmq_curve_keypair failed");
  }
  SIFT_RETURN_IF_ERROR(WriteFile(prefix + ".key", std::string(sec) + "\n", 0600));
  SIFT_RETURN_IF_ERROR(WriteFile(prefix + ".pub", std::string(pub) + "\n", 0644));
  *summary = "wrote " + prefix + ".key (secret, keep private) and " + prefix +
             ".pub (public: " + pub + ")";
  return Status::Ok();
}

void ServeZapRequest(zmq::socket_t& zap, const CurveConfig& config) {
  std::vector<zmq::message_t> req;
  if (!zmq::recv_multipart(zap, std::back_inserter(req), zmq::recv_flags::dontwait)) return;
  if (req.size() < 6) return;  // not a ZAP request; REP needs a reply anyway
  const std::string version = req[0].to_string();
  const std::string request_id = req[1].to_string();
  const std::string address = req[3].to_string();
  const std::string mechanism = req[5].to_string();
  bool ok = false;
  std::string client;
  if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
    char z85[41];
    zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
    client = z85;
    ok = config.client_keys.count(client) > 0;
  }
  if (!ok) {
    LogWarn("auth_denied", {{"address", address}, {"mechanism", mechanism}, {"key", client}});
  } else {
    LogDebug("auth_ok", {{"address", address}, {"key", client}});
  }
  std::vector<zmq::const_buffer> reply = {zmq::buffer(version), zmq::buffer(request_id),
                                          zmq::str_buffer(""),  zmq::str_buffer(""),
                                          zmq::buffer(client),  zmq::str_buffer("")};
  reply[2] = ok ? zmq::str_buffer("200") : zmq::str_buffer("400");
  reply[3] = ok ? zmq::str_buffer("OK") : zmq::str_buffer("client key not authorised");
  zmq::send_multipart(zap, reply);
}

}  // namespace sift::daemon
