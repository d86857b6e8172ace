// ParseListenAddress: the address one of siftd's HTTP ports listens on (--http, --openai), as
// a TCP endpoint.
//
// Accepted: "HOST:PORT" with an IPv4 or IPv6 literal (IPv6 in brackets: "[::1]:7702"),
// "localhost:PORT" (= 127.0.0.1), or a bare "PORT", which means 127.0.0.1:PORT (loopback unless
// a host is named). Port 0 asks the kernel for a free one. Host names other than localhost are
// refused: the daemon binds interfaces, it does not resolve names.
//
// THREADING: pure function.
// ERRORS:    INVALID_ARGUMENT with `reason` and a message naming `option`; never throws.
#ifndef SIFT_DAEMON_LISTEN_ADDRESS_H_
#define SIFT_DAEMON_LISTEN_ADDRESS_H_

#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "sift/status.h"

namespace sift::daemon {

Status ParseListenAddress(const std::string& text, const std::string& option,
                          const std::string& reason, boost::asio::ip::tcp::endpoint* out);

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_LISTEN_ADDRESS_H_
