// CURVE security for the client port and the worker port: key files, the loopback rule and the
// ZAP handler, and the client side of a worker connection (CurveClientKeys).
//
// siftd refuses to bind a non-loopback endpoint unless CURVE is configured: a server secret
// key file and a file of authorised client public keys. Then every connection on every
// endpoint must complete a CURVE handshake with an authorised key (checked by the ZAP handler
// the front end runs). Keys are Z85 text (40 characters), one key per file for the server's
// secret key, one per line (with # comments) for authorised clients. `siftd --make-curve-keys
// PREFIX` writes PREFIX.key (secret, mode 0600) and PREFIX.pub (public), each with a comment
// line saying which it is, and refuses to overwrite an existing file. A public key given as the
// server's secret key is refused at start (LoadCurveConfig: the file's comment, a .pub name, a
// PREFIX.pub beside PREFIX.key that does not match, or an authorised client key).
//
// THREADING: pure functions; ServeZapRequest runs on the thread that owns the ZAP socket.
// ERRORS:    loading and key generation return a Status naming the file and the problem.
#ifndef SIFT_DAEMON_CURVE_H_
#define SIFT_DAEMON_CURVE_H_

#include <set>
#include <string>
#include <zmq.hpp>

#include "daemon/peer_log_limiter.h"
#include "sift/status.h"

namespace sift::daemon {

struct CurveConfig {
  bool enabled = false;
  std::string server_secret;          // Z85
  std::string server_public;          // Z85 (derived)
  std::set<std::string> client_keys;  // authorised client public keys, Z85
};

// The connecting side of a CURVE link (siftd's stage hops to a `siftd --worker`): the peer's
// public key and this process's own key pair, all Z85. An empty server_key = plain TCP.
struct CurveClientKeys {
  std::string server_key;
  std::string public_key;
  std::string secret_key;
  bool enabled() const { return !server_key.empty(); }
};

// True for ipc://, inproc:// and tcp:// on 127.0.0.0/8, localhost or [::1].
bool IsLoopbackEndpoint(const std::string& endpoint);

// Reads the first non-comment line of a key file (or takes `value` itself if it is a 40-char
// Z85 key) and checks it decodes to 32 bytes.
Status ReadZ85Key(const std::string& file_or_key, std::string* key);
// Loads the server secret and the authorised client keys (at least one).
Status LoadCurveConfig(const std::string& secret_key_file, const std::string& client_keys_file,
                       CurveConfig* config);
// Loads this process's key pair from `secret_key_file` (the public key is derived) for CURVE
// links it opens, with `server_key` (a Z85 key or a file holding one; "" = none yet) as the
// default peer key. A public key given as the secret key is refused as LoadCurveConfig does.
Status LoadCurveClientKeys(const std::string& secret_key_file, const std::string& server_key,
                           CurveClientKeys* keys);
// Writes PREFIX.key and PREFIX.pub; `summary` says what was written.
Status MakeCurveKeyFiles(const std::string& prefix, std::string* summary);

// Answers one ZAP request waiting on `zap` (a REP socket bound to inproc://zeromq.zap.01):
// 200 for a CURVE client whose key is authorised, 400 otherwise, logged as auth_denied through
// `log` (at most one line per interval per peer address). Returns true for a refusal.
bool ServeZapRequest(zmq::socket_t& zap, const CurveConfig& config, PeerLogLimiter& log);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_CURVE_H_
