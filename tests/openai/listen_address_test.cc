// Unit tests of the listen address syntax of siftd's HTTP ports (daemon/listen_address.h):
// --openai and --http.
#include "daemon/listen_address.h"

#include <gtest/gtest.h>

#include <string>

namespace sift::daemon {
namespace {

using boost::asio::ip::tcp;

tcp::endpoint Parsed(const std::string& text) {
  tcp::endpoint endpoint;
  const Status s = ParseListenAddress(text, "--openai", "bad_openai_address", &endpoint);
  EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
  return endpoint;
}

TEST(ListenAddressTest, Forms) {
  // A bare port is loopback: binding anywhere else has to be asked for.
  EXPECT_EQ(Parsed("7702"), tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 7702));
  EXPECT_TRUE(Parsed("0").address().is_loopback());
  EXPECT_EQ(Parsed("0").port(), 0);  // any free port
  EXPECT_EQ(Parsed("127.0.0.1:8080"),
            tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 8080));
  EXPECT_EQ(Parsed("localhost:1").address().to_string(), "127.0.0.1");
  const tcp::endpoint v6 = Parsed("[::1]:7702");
  EXPECT_TRUE(v6.address().is_v6());
  EXPECT_TRUE(v6.address().is_loopback());
  EXPECT_EQ(v6.port(), 7702);
  const tcp::endpoint any = Parsed("0.0.0.0:65535");
  EXPECT_FALSE(any.address().is_loopback());
  EXPECT_EQ(any.port(), 65535);
  EXPECT_FALSE(Parsed("[::]:80").address().is_loopback());
  EXPECT_FALSE(Parsed("10.1.2.3:80").address().is_loopback());
}

TEST(ListenAddressTest, Errors) {
  for (const std::string& text :
       {std::string(""), std::string("localhost"), std::string(":7702"), std::string("7702:"),
        std::string("127.0.0.1:"), std::string("127.0.0.1:65536"), std::string("127.0.0.1:12ab"),
        std::string("127.0.0.1:-1"), std::string("127.0.0.1: 80"), std::string("99999"),
        std::string("123456789012345678901234567890"), std::string("example.com:80"),
        std::string("[::1]"), std::string("::1"), std::string("1.2.3:80"),
        std::string("127.0.0.1:7702\n")}) {
    tcp::endpoint endpoint;
    const Status s = ParseListenAddress(text, "--openai", "bad_openai_address", &endpoint);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << text << "'";
    EXPECT_EQ(s.reason(), "bad_openai_address") << text;
    EXPECT_EQ(s.message().rfind("--openai: ", 0), 0u) << s.message();
  }
}

}  // namespace
}  // namespace sift::daemon
