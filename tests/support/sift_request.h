// SendAndAwait: one SIFT/1 request to a daemon over a fresh DEALER connection, and its terminal
// reply, for the daemon tests that ask one request at a time per call.
//
// Header-only. THREADING: each call has its own ZeroMQ context and socket, so calls from several
// threads at once are fine. ERRORS: none thrown; a request with no terminal reply in `timeout`
// gives {"type": "timeout"}.
#ifndef SIFT_TESTS_SUPPORT_SIFT_REQUEST_H_
#define SIFT_TESTS_SUPPORT_SIFT_REQUEST_H_

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "client.h"

namespace sift::testing {

// Sends `header` (a generate, with its "id") to `endpoint`; returns the `final` or `error` reply
// for that id, skipping everything else (chunks, heartbeats).
inline nlohmann::json SendAndAwait(const std::string& endpoint, const nlohmann::json& header,
                                   std::chrono::seconds timeout = std::chrono::seconds(120)) {
  zmq::context_t ctx(1);
  sift::client::ClientOptions o;
  o.endpoint = endpoint;
  sift::client::SiftClient c(ctx, o);
  c.Send(header);
  const auto end = std::chrono::steady_clock::now() + timeout;
  nlohmann::json r;
  while (std::chrono::steady_clock::now() < end) {
    if (!c.Recv(&r, 100) || r.value("id", nlohmann::json()) != header["id"]) continue;
    if (r["type"] == "final" || r["type"] == "error") return r;
  }
  return {{"type", "timeout"}};
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_SIFT_REQUEST_H_
