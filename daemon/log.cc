#include "daemon/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace sift::daemon {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kJson)};
std::mutex g_sink_mu;
std::function<void(const std::string&)> g_sink;  // guarded by g_sink_mu

std::string Timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count()));
  return buf;
}

// The names every line has; a field of the same name is dropped rather than replace them.
bool IsLineKey(const std::string& key) { return key == "ts" || key == "level" || key == "event"; }

std::string Dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A string value as text: bare when it cannot be misread (no space, quote, '=' or control
// character, not empty), else JSON-quoted.
std::string TextValue(const nlohmann::json& value) {
  if (!value.is_string()) return Dump(value);
  const std::string& s = value.get_ref<const std::string&>();
  const bool bare = !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= ' ' || u == 0x7f || c == '"' || c == '=';
  });
  return bare ? s : Dump(value);
}

}  // namespace

bool ParseLogFormat(const std::string& name, LogFormat* format) {
  if (name == "json") {
    *format = LogFormat::kJson;
  } else if (name == "text") {
    *format = LogFormat::kText;
  } else if (name == "auto") {
    *format = ::isatty(STDERR_FILENO) == 1 ? LogFormat::kText : LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }

std::string FormatLogLine(LogFormat format, const std::string& ts, LogLevel level,
                          const std::string& event, const nlohmann::json& fields) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json line = nlohmann::ordered_json::object();  // ts, level, event first
    line["ts"] = ts;
    line["level"] = LogLevelName(level);
    line["event"] = event;
    if (fields.is_object()) {
      for (auto it = fields.begin(); it != fields.end(); ++it) {
        if (!IsLineKey(it.key())) line[it.key()] = it.value();
      }
    }
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string name = LogLevelName(level);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  name.resize(5, ' ');
  std::string text = ts + " " + name + " " + event;
  if (fields.is_object()) {
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (IsLineKey(it.key())) continue;
      text += " " + it.key() + "=" + TextValue(it.value());
    }
  }
  return text;
}

bool ParseLogLevel(const std::string& name, LogLevel* level) {
  if (name == "debug") {
    *level = LogLevel::kDebug;
  } else if (name == "info") {
    *level = LogLevel::kInfo;
  } else if (name == "warn" || name == "warning") {
    *level = LogLevel::kWarn;
  } else if (name == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void SetLogSink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = std::move(sink);
}

void Log(LogLevel level, const std::string& event, const nlohmann::json& fields) {
  if (!LogEnabled(level)) return;
  std::string text =
      FormatLogLine(static_cast<LogFormat>(g_format.load()), Timestamp(), level, event, fields);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (g_sink) {
    text.pop_back();
    g_sink(text);
    return;
  }
  // One write(2) per line so lines from several threads (and processes) never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace sift::daemon
