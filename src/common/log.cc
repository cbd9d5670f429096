// stderr sink for the logger; a mutex keeps lines whole when engine and server threads log together.
#include "common/log.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};
std::mutex g_mutex;
std::string g_tag;  // written once at startup, before other threads log
const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO ";
    case LogLevel::kWarn:
      return "WARN ";
    case LogLevel::kError:
      return "ERROR";
    default:
      return "";
  }
}
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}
LogLevel log_level() {
  return g_level;
}

void set_log_format(LogFormat format) {
  g_format = format;
}

void set_log_tag(const std::string& tag) {
  g_tag = tag;
}

LogFormat parse_log_format(const std::string& name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  fail(ErrorKind::kInvalidArgument, "unknown log format '" + name + "' (expected text or json)");
}

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  fail(ErrorKind::kInvalidArgument,
       "unknown log level '" + name + "' (expected debug, info, warn, error, off)");
}

void log_fields(LogLevel level, const std::string& message, const LogFields& fields) {
  if (level < g_level.load()) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::string line;
  if (g_format.load() == LogFormat::kJson) {
    char iso[40];
    std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S", &tm);
    nlohmann::ordered_json j;
    j["time"] = std::string(iso) + "." + std::to_string(1000 + ms).substr(1) + "Z";
    std::string lvl = level_tag(level);
    while (!lvl.empty() && lvl.back() == ' ') lvl.pop_back();
    for (char& c : lvl) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    j["level"] = lvl;
    if (!g_tag.empty()) j["rank"] = g_tag;
    j["msg"] = message;
    for (const auto& [k, v] : fields) j[k] = v;
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    char head[64];
    std::snprintf(head, sizeof head, "%s %s.%03d ", level_tag(level), stamp, ms);
    line = head;
    if (!g_tag.empty()) line += "[" + g_tag + "] ";
    line += message;
    for (const auto& [k, v] : fields) line += " " + k + "=" + v;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s\n", line.c_str());
}

void log_line(LogLevel level, const std::string& message) {
  log_fields(level, message, {});
}

}  // namespace m3
