// Structured logging for siftd: one JSON object per line on stderr.
//
//   {"ts":"2024-05-01T12:00:00.123Z","level":"info","event":"request_done","req":"r1",...}
//
// Every line has `ts` (UTC, milliseconds), `level` and `event` (a stable snake_case slug); the
// rest are event fields. Prompts and generated text are never logged.
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
