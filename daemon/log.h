// Structured logging for siftd: one event per line on stderr, as JSON (for machines) or as text
// (for people), the same events and fields either way:
//
//   {"ts":"2024-05-01T12:00:00.123Z","level":"info","event":"request_done","req":"r1",...}
//   2024-05-01T12:00:00.123Z INFO  request_done req=r1 ...
//
// Every line has `ts` (UTC, milliseconds), `level` and `event` (a stable snake_case slug); the
// rest are event fields (a field named ts, level or event is dropped). In text, a field is
// key=value: a string bare when it has no space, quote,
// `=` or control character, else JSON-quoted; other values as compact JSON. Prompts and
// generated text are never logged.
//
// THREADING: every function is safe from any thread; a line is written with one write(2).
// ERRORS:    none; a failing write is ignored (logging never takes the daemon down).
#ifndef SIFT_DAEMON_LOG_H_
#define SIFT_DAEMON_LOG_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace sift::daemon {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// "debug", "info", "warn" (or "warning"), "error"; false for anything else.
bool ParseLogLevel(const std::string& name, LogLevel* level);
const char* LogLevelName(LogLevel level);

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

enum class LogFormat { kJson, kText };

// "json", "text", or "auto" (text when stderr is a terminal, else JSON); false for anything else.
bool ParseLogFormat(const std::string& name, LogFormat* format);
void SetLogFormat(LogFormat format);  // default kJson

// One line (no newline) in `format`; what Log writes. Exposed for tests.
std::string FormatLogLine(LogFormat format, const std::string& ts, LogLevel level,
                          const std::string& event, const nlohmann::json& fields);

// Replaces the output (default: stderr). Tests capture lines with it; nullptr restores stderr.
void SetLogSink(std::function<void(const std::string& line)> sink);

// Writes {"ts","level","event", ...fields}. `fields` must be an object (or null).
void Log(LogLevel level, const std::string& event, const nlohmann::json& fields = nullptr);

inline void LogDebug(const std::string& event, const nlohmann::json& fields = nullptr) {
  if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, event, fields);
}
inline void LogInfo(const std::string& event, const nlohmann::json& fields = nullptr) {
  Log(LogLevel::kInfo, event, fields);
}
inline void LogWarn(const std::string& event, const nlohmann::json& fields = nullptr) {
  Log(LogLevel::kWarn, event, fields);
}
inline void LogError(const std::string& event, const nlohmann::json& fields = nullptr) {
  Log(LogLevel::kError, event, fields);
}

}  // namespace sift::daemon

#endif  // SIFT_DAEMON_LOG_H_
