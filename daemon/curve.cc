#include "daemon/curve.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
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

// Writes `text` to a new file `path`; refuses (and leaves it alone) if `path` exists. The text
// goes to a private temporary first and is linked into place, so no reader sees half a key and
// an existing file is never replaced.
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return Status(StatusCode::kInternal, "curve_key_file", path + ": cannot write");
  ::chmod(tmp.c_str(), mode);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  const int linked = ok && closed ? ::link(tmp.c_str(), path.c_str()) : -1;
  const int link_errno = errno;
  std::remove(tmp.c_str());
  if (linked != 0 && ok && closed && link_errno == EEXIST) {
    return Status(StatusCode::kAlreadyExists, "curve_key_exists",
                  path +
                      ": already exists; not overwritten (remove it first, or choose "
                      "another PREFIX)");
  }
  if (linked != 0) return Status(StatusCode::kInternal, "curve_key_file", path + ": write failed");
  return Status::Ok();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first comment line of a key file, lower-cased ("" when none).
std::string FirstComment(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty()) continue;
    if (line[0] != '#') return "";
    for (char& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return line;
  }
  return "";
}

// A Z85 public key and a Z85 secret key look alike (40 characters, 32 bytes), so a public key
// given as --curve-secret-key would start a server with another identity that no client
// trusts. Refused here: a file whose comment says it is public (as --make-curve-keys writes),
// a *.pub file, a key that equals its PREFIX.pub sibling instead of deriving it, and a key
// listed among the authorised client public keys.
Status CheckSecretKeyFile(const std::string& file, const CurveConfig& config,
                          const std::string& flag = "--curve-secret-key") {
  auto refuse = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "curve_public_key_as_secret",
                  file + ": " + why + "; " + flag +
                      " needs a SECRET key (PREFIX.key of --make-curve-keys), not a public key");
  };
  if (FirstComment(file).find("public") != std::string::npos) {
    return refuse("the file says it holds a public key");
  }
  if (EndsWith(file, ".pub")) return refuse("a .pub file holds a public key");
  if (config.client_keys.count(config.server_secret)) {
    return refuse("this key is one of the authorised client PUBLIC keys");
  }
  if (EndsWith(file, ".key")) {
    const std::string pub_file = file.substr(0, file.size() - 4) + ".pub";
    std::string pub;
    if (std::ifstream(pub_file) && ReadZ85Key(pub_file, &pub).ok()) {
      if (pub == config.server_secret) return refuse("it equals " + pub_file);
      if (pub != config.server_public) {
        return Status(StatusCode::kInvalidArgument, "curve_key_mismatch",
                      file + ": its public key is " + config.server_public + ", but " + pub_file +
                          " holds " + pub +
                          "; the pair does not match (was one of them replaced?)");
      }
    }
  }
  return Status::Ok();
}

// A secret key (a Z85 key or a file holding one) and the public key it derives.
Status LoadSecretKey(const std::string& file_or_key, std::string* secret, std::string* pub) {
  SIFT_RETURN_IF_ERROR(ReadZ85Key(file_or_key, secret));
  char derived[41];
  if (zmq_curve_public(derived, secret->c_str()) != 0) {
    return Status(StatusCode::kInvalidArgument, "curve_key_file",
                  file_or_key + ": not a valid secret key");
  }
  *pub = derived;
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
  SIFT_RETURN_IF_ERROR(
      LoadSecretKey(secret_key_file, &config->server_secret, &config->server_public));
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
  if (!ValidZ85Key(secret_key_file)) {  // a file, not the key itself
    SIFT_RETURN_IF_ERROR(CheckSecretKeyFile(secret_key_file, *config));
  } else if (config->client_keys.count(config->server_secret)) {
    return Status(StatusCode::kInvalidArgument, "curve_public_key_as_secret",
                  "--curve-secret-key is one of the authorised client PUBLIC keys");
  }
  config->enabled = true;
  return Status::Ok();
}

Status LoadCurveClientKeys(const std::string& secret_key_file, const std::string& server_key,
                           CurveClientKeys* keys) {
  *keys = CurveClientKeys();
  if (!zmq_has("curve")) {
    return Status(StatusCode::kFailedPrecondition, "curve_unavailable",
                  "this libzmq was built without CURVE support");
  }
  SIFT_RETURN_IF_ERROR(LoadSecretKey(secret_key_file, &keys->secret_key, &keys->public_key));
  if (!server_key.empty()) SIFT_RETURN_IF_ERROR(ReadZ85Key(server_key, &keys->server_key));
  if (!ValidZ85Key(secret_key_file)) {  // a file: the same public-key checks as the server's
    CurveConfig check;
    check.server_secret = keys->secret_key;
    check.server_public = keys->public_key;
    if (!keys->server_key.empty()) check.client_keys.insert(keys->server_key);
    SIFT_RETURN_IF_ERROR(CheckSecretKeyFile(secret_key_file, check, "--hop-curve-secret-key"));
  }
  if (keys->secret_key == keys->server_key) {
    return Status(StatusCode::kInvalidArgument, "curve_public_key_as_secret",
                  secret_key_file + ": equals the worker's PUBLIC key");
  }
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
  // Never over an existing pair: that would lock out every client of the server using it.
  for (const char* ext : {".key", ".pub"}) {
    if (std::ifstream(prefix + ext)) {
      return Status(StatusCode::kAlreadyExists, "curve_key_exists",
                    prefix + ext +
                        ": already exists; not overwritten (remove the pair first, "
                        "or choose another PREFIX)");
    }
  }
  SIFT_RETURN_IF_ERROR(WriteNewFile(
      prefix + ".key", "# CURVE secret key (siftd --curve-secret-key)\n" + std::string(sec) + "\n",
      0600));
  const Status pub_written =
      WriteNewFile(prefix + ".pub",
                   "# CURVE public key (clients' server key; authorised-client lists)\n" +
                       std::string(pub) + "\n",
                   0644);
  if (!pub_written.ok()) {
    std::remove((prefix + ".key").c_str());  // the one just written: no half pair left
    return pub_written;
  }
  *summary = "wrote " + prefix + ".key (secret, keep private) and " + prefix +
             ".pub (public: " + pub + ")";
  return Status::Ok();
}

bool ServeZapRequest(zmq::socket_t& zap, const CurveConfig& config, PeerLogLimiter& log) {
  std::vector<zmq::message_t> req;
  if (!zmq::recv_multipart(zap, std::back_inserter(req), zmq::recv_flags::dontwait)) return false;
  if (req.size() < 6) return false;  // not a ZAP request; REP needs a reply anyway
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
    log.Log(LogLevel::kWarn, "auth_denied", address, {{"mechanism", mechanism}, {"key", client}});
  } else {
    LogDebug("auth_ok", {{"address", address}, {"key", client}});
  }
  std::vector<zmq::const_buffer> reply = {zmq::buffer(version), zmq::buffer(request_id),
                                          zmq::str_buffer(""),  zmq::str_buffer(""),
                                          zmq::buffer(client),  zmq::str_buffer("")};
  reply[2] = ok ? zmq::str_buffer("200") : zmq::str_buffer("400");
  reply[3] = ok ? zmq::str_buffer("OK") : zmq::str_buffer("client key not authorised");
  zmq::send_multipart(zap, reply);
  return !ok;
}

}  // namespace sift::daemon
