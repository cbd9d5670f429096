// Leveled logging to stderr, one line per event: "LEVEL time message k=v ..." or, with --log-format json, one
// JSON object {"time", "level", "msg", fields...} per line for log pipelines. Level and format are set once
// at startup; logging is thread-safe and never throws.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace m3 {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

enum class LogFormat { kText, kJson };

void set_log_level(LogLevel level);
void set_log_format(LogFormat format);
// A tag on every line of this process ("rank 1" on the workers of a multi-rank run): a "[tag] " prefix in
// text, a "rank" member in json. Set once at startup.
void set_log_tag(const std::string& tag);
LogFormat parse_log_format(const std::string& name);  // throws m3::Error(kInvalidArgument) on an unknown name
using LogFields = std::vector<std::pair<std::string, std::string>>;
// An event with named fields (rendered as k=v in text, as JSON members in json).
void log_fields(LogLevel level, const std::string& message, const LogFields& fields);
LogLevel log_level();
LogLevel parse_log_level(const std::string& name);  // throws m3::Error(kInvalidArgument) on an unknown name
void log_line(LogLevel level, const std::string& message);

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, detail::concat(args...));
}
template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, detail::concat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::kWarn) log_line(LogLevel::kWarn, detail::concat(args...));
}
template <typename... Args>
void log_error(const Args&... args) {
  if (log_level() <= LogLevel::kError) log_line(LogLevel::kError, detail::concat(args...));
}

}  // namespace m3
