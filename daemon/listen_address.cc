#include "daemon/listen_address.h"

#include <boost/asio/ip/address.hpp>

namespace sift::daemon {

Status ParseListenAddress(const std::string& text, const std::string& option,
                          const std::string& reason, boost::asio::ip::tcp::endpoint* out) {
  auto fail = [&](const std::string& message) {
    return Status(StatusCode::kInvalidArgument, reason, option + ": " + message);
  };
  auto all_digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  const std::string host_port = all_digits(text) ? "127.0.0.1:" + text : text;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return fail("expected HOST:PORT or PORT (e.g. 127.0.0.1:7702, [::1]:7702 or 7702), got '" +
                text + "'");
  }
  std::string host = host_port.substr(0, colon);
  const std::string port_text = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  const boost::asio::ip::address address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    return fail("'" + host +
                "' is not an IP address (use 127.0.0.1, ::1, 0.0.0.0 or an interface's address)");
  }
  if (!all_digits(port_text) || port_text.size() > 5 || std::stoul(port_text) > 65535) {
    return fail("bad port '" + port_text + "' (0 to 65535)");
  }
  *out = boost::asio::ip::tcp::endpoint(address, static_cast<uint16_t>(std::stoul(port_text)));
  return Status::Ok();
}

}  // namespace sift::daemon
