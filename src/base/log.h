// Logging: leveled lines on stderr through spdlog, as text or as JSON (one object per line), each with a UTC
// timestamp, the level and the process's component ("serve", "route", ...), and, for lines about one request, its
// request id and W3C trace id, so that one request can be followed through the router, the prefill node and the
// decode node (grep its id in each process's log).
//
//   text: 2026-12-03T10:50:28.123Z info  route access request_id=rt-94a3 trace_id=4bf9... method=POST status=200
//   json: {"ts":"2026-12-03T10:50:28.123Z","level":"info","component":"route","request_id":"rt-94a3",...}
//
// Access lines (log::access) are one per request at info level, with the fields an operator greps for: method,
// route, model, status, prompt and completion tokens, time to first token, total time.
//
// Configuration is process-wide: `tessera --log-level L --log-format F` (or TESSERA_LOG_LEVEL/TESSERA_LOG_FORMAT,
// which `tessera up` passes to its children). Thread-safety: every function may be called from any thread.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
enum class Format : int { kText, kJson };

void set_level(Level level);
Level level();
void set_format(Format format);
Format format();
// The process's part, printed on every line ("serve", "route", "up", ...); "tessera" until set.
void set_component(std::string_view component);
// "debug", "info", "warn" (or "warning"), "error", "off"; InvalidArgument naming the choices otherwise.
Result<Level> parse_level(std::string_view text);
// "text" or "json".
Result<Format> parse_format(std::string_view text);

// What a line is about, when it is about one request.
struct Fields {
  std::string_view request_id;
  std::string_view trace_id;
};

void write(Level level, std::string_view message, const Fields& fields = {});

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kError) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}
// The same about one request.
template <typename... Args>
void info(const Fields& fields, fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...), fields);
}
template <typename... Args>
void warn(const Fields& fields, fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...), fields);
}

// One request, as it ended. Negative numbers are "not known" and left out.
struct Access {
  std::string_view method;  // "POST"
  std::string_view route;   // "/v1/chat/completions"
  std::string_view model;
  int status = 0;
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  double ttft_ms = -1;
  double total_ms = -1;
  std::string_view request_id;
  std::string_view trace_id;
  std::string_view remote;  // the client's address
};
void access(const Access& a);

}  // namespace tessera::log
