#include "daemon/api_keys.h"

#include <algorithm>
#include <cctype>
#include <fstream>

namespace sift::daemon {
namespace {

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

bool ValidKey(const std::string& key) {
  if (key.size() < kMinApiKeyBytes) return false;
  for (unsigned char c : key) {
    if (c <= ' ' || c >= 127) return false;
  }
  return true;
}

// Equal content, without an early exit on the first difference.
bool SameBytes(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Status ApiKeys::Load(const std::string& path) {
  keys_.clear();
  std::ifstream in(path);
  if (!in) {
    return Status(StatusCode::kInvalidArgument, "api_keys", "cannot read API key file " + path);
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string key = Trim(line);
    if (key.empty() || key[0] == '#') continue;
    if (!ValidKey(key)) {
      return Status(StatusCode::kInvalidArgument, "api_keys",
                    path + ":" + std::to_string(number) + ": an API key must be at least " +
                        std::to_string(kMinApiKeyBytes) +
                        " printable ASCII characters without spaces");
    }
    keys_.push_back(key);
  }
  if (keys_.empty()) {
    return Status(StatusCode::kInvalidArgument, "api_keys", "no API key in " + path);
  }
  return Status::Ok();
}

bool ApiKeys::Authorizes(std::string_view authorization) const {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {  // the scheme is case-insensitive
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kScheme[i]))) {
      return false;
    }
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  bool found = false;
  for (const std::string& key : keys_) found |= SameBytes(token, key);
  return found;
}

}  // namespace sift::daemon
