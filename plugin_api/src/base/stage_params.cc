// StageParams: typed getters with range checks and errors that name where a value came from.
#include "sift/stage_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "sift/error.h"

namespace sift {
namespace {

template <typename T>
std::string RangeText(const char* what, T min, T max, T lowest, T highest) {
  std::ostringstream os;
  os << what;
  if (min != lowest && max != highest) {
    os << " in [" << min << ", " << max << "]";
  } else if (min != lowest) {
    os << " >= " << min;
  } else if (max != highest) {
    os << " <= " << max;
  }
  return os.str();
}

std::string IntRange(int64_t min, int64_t max) {
  return RangeText<int64_t>("an integer", min, max, INT64_MIN, INT64_MAX);
}

std::string DoubleRange(double min, double max) {
  return RangeText<double>("a number", min, max, -1e300, 1e300);
}

// The integer in `v`, or false when it is not an integer that fits in int64.
bool AsInt(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

}  // namespace

void StageParams::Set(const std::string& key, nlohmann::json value, std::string origin) {
  values_[key] = Entry{std::move(value), std::move(origin)};
  read_.erase(key);
}

const StageParams::Entry* StageParams::Lookup(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return nullptr;
  read_.insert(key);
  return &it->second;
}

std::string StageParams::Where(const std::string& key) const {
  auto it = values_.find(key);
  std::string origin = it != values_.end() ? it->second.origin : file_;
  if (origin.empty()) origin = "<params>";
  return origin + ": stage '" + stage_ + "' (plugin " + plugin_ + "): key '" + key + "': ";
}

void StageParams::Fail(const std::string& key, const std::string& what) const {
  throw Error(Where(key) + what);
}

int64_t StageParams::GetInt(const std::string& key, int64_t fallback, int64_t min,
                            int64_t max) const {
  const Entry* e = Lookup(key);
  if (e == nullptr) return fallback;
  int64_t v = 0;
  if (!AsInt(e->value, &v) || v < min || v > max) {
    Fail(key, "expected " + IntRange(min, max) + ", got " + e->value.dump());
  }
  return v;
}

int64_t StageParams::GetInt(const std::string& key, int64_t fallback, int64_t min, int64_t max,
                            const RequestCap& cap) const {
  const int64_t v = GetInt(key, fallback, min, max);
  if (!FromRequest(key) || (v >= cap.min && v <= cap.max) || (cap.allow_zero && v == 0)) {
    return v;
  }
  Fail(key, std::string("a request may set ") + (cap.allow_zero ? "0 or " : "") +
                IntRange(std::max(min, cap.min), std::min(max, cap.max)) +
                " (the cost cap on per-request overrides; a pipeline file may set " +
                IntRange(min, max) + "), got " + std::to_string(v));
}

bool StageParams::FromRequest(const std::string& key) const {
  auto it = values_.find(key);
  return it != values_.end() && it->second.origin == kRequestOrigin;
}

int64_t StageParams::RequireInt(const std::string& key, int64_t min, int64_t max) const {
  if (!Has(key)) Fail(key, "required: " + IntRange(min, max));
  return GetInt(key, 0, min, max);
}

double StageParams::GetDouble(const std::string& key, double fallback, double min,
                              double max) const {
  const Entry* e = Lookup(key);
  if (e == nullptr) return fallback;
  if (!e->value.is_number() || !std::isfinite(e->value.get<double>()) ||
      e->value.get<double>() < min || e->value.get<double>() > max) {
    Fail(key, "expected " + DoubleRange(min, max) + ", got " + e->value.dump());
  }
  return e->value.get<double>();
}

bool StageParams::GetBool(const std::string& key, bool fallback) const {
  const Entry* e = Lookup(key);
  if (e == nullptr) return fallback;
  if (!e->value.is_boolean()) Fail(key, "expected true or false, got " + e->value.dump());
  return e->value.get<bool>();
}

std::string StageParams::GetString(const std::string& key, const std::string& fallback,
                                   const std::vector<std::string>& allowed) const {
  const Entry* e = Lookup(key);
  if (e == nullptr) return fallback;
  std::string expected = "a string";
  if (!allowed.empty()) {
    expected = "one of";
    for (size_t i = 0; i < allowed.size(); ++i) {
      expected += (i == 0 ? " \"" : ", \"") + allowed[i] + "\"";
    }
  }
  if (!e->value.is_string()) Fail(key, "expected " + expected + ", got " + e->value.dump());
  std::string v = e->value.get<std::string>();
  if (!allowed.empty()) {
    bool found = false;
    for (const std::string& a : allowed) found = found || a == v;
    if (!found) Fail(key, "expected " + expected + ", got " + e->value.dump());
  }
  return v;
}

std::vector<int64_t> StageParams::GetIntList(const std::string& key,
                                             const std::vector<int64_t>& fallback, int64_t min,
                                             int64_t max) const {
  const Entry* e = Lookup(key);
  if (e == nullptr) return fallback;
  const std::string expected =
      RangeText<int64_t>("a list of integers", min, max, INT64_MIN, INT64_MAX);
  if (!e->value.is_array()) Fail(key, "expected " + expected + ", got " + e->value.dump());
  std::vector<int64_t> out;
  for (const nlohmann::json& item : e->value) {
    int64_t v = 0;
    if (!AsInt(item, &v) || v < min || v > max) {
      Fail(key, "expected " + expected + ", got " + e->value.dump());
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> StageParams::UnreadKeys() const {
  std::vector<std::string> unread;
  for (const auto& [key, entry] : values_) {
    if (read_.count(key) == 0) unread.push_back(key);
  }
  return unread;
}

nlohmann::json StageParams::ToJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, entry] : values_) out[key] = entry.value;
  return out;
}

}  // namespace sift
