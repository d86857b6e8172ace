// HttpGet: one plain HTTP/1.1 GET over a fresh loopback socket, for tests that read siftd's
// operations port (/health, /metrics). Returns "STATUS\nBODY", or a short reason on failure.
//
// Header-only.
#ifndef SIFT_TESTS_SUPPORT_HTTP_GET_H_
#define SIFT_TESTS_SUPPORT_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace sift::testing {

inline std::string HttpGet(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
  ::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  if (::write(fd, req.data(), req.size()) < 0) {
    ::close(fd);
    return "write failed";
  }
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t sp = resp.find(' ');
  const size_t body = resp.find("\r\n\r\n");
  if (sp == std::string::npos || body == std::string::npos) return "bad response";
  return resp.substr(sp + 1, 3) + "\n" + resp.substr(body + 4);
}

// The value of an unlabelled metric in a Prometheus text body, or -1 when absent.
inline double MetricValue(const std::string& body, const std::string& name) {
  size_t at = 0;
  while ((at = body.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || body[at - 1] == '\n') return std::stod(body.substr(at + name.size() + 1));
    at += name.size();
  }
  return -1;
}

}  // namespace sift::testing

#endif  // SIFT_TESTS_SUPPORT_HTTP_GET_H_
