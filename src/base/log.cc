#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>

#include <fmt/format.h>

namespace tessera::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kWarn)};
std::atomic<int> g_format{static_cast<int>(Format::kText)};
std::mutex g_component_mu;
std::string g_component = "tessera";  // GUARDED_BY(g_component_mu)

constexpr std::string_view kNames[] = {"debug", "info", "warn", "error", "off"};

// The one spdlog logger: whole lines, written under its own lock, so threads never interleave within a line. The
// line is formatted here (timestamp included) and handed over as the message, so text and JSON share one sink.
spdlog::logger& sink() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string component() {
  std::lock_guard<std::mutex> lock(g_component_mu);
  return g_component;
}

// A line: the common head, then `extra` fields (JSON: more members; text: key=value), then the message.
struct Line {
  std::string head, fields;
  bool json;
  Line(Level level, const Fields& f) : json(format() == Format::kJson) {
    const std::string ts = utc_now();
    const std::string_view name = kNames[static_cast<int>(level)];
    if (json) {
      head = "{\"ts\":\"" + ts + "\",\"level\":\"" + std::string(name) + "\",\"component\":";
      json_string(head, component());
    } else {
      head = fmt::format("{} {:<5} {}", ts, name, component());
    }
    if (!f.request_id.empty()) add("request_id", f.request_id);
    if (!f.trace_id.empty()) add("trace_id", f.trace_id);
  }
  void add(std::string_view key, std::string_view value) {
    if (json) {
      fields += ",\"" + std::string(key) + "\":";
      json_string(fields, value);
    } else {
      fields += fmt::format(" {}={}", key, value.empty() ? "-" : value);
    }
  }
  void add_number(std::string_view key, double value, int precision) {
    if (json) {
      fields += fmt::format(",\"{}\":{:.{}f}", key, value, precision);
    } else {
      fields += fmt::format(" {}={:.{}f}", key, value, precision);
    }
  }
  // text: HEAD MESSAGE key=value...; json: {HEAD, fields..., "msg": MESSAGE}
  void finish(std::string_view message) {
    std::string out = std::move(head);
    if (json) {
      out += fields;
      out += ",\"msg\":";
      json_string(out, message);
      out += '}';
    } else {
      out += ' ';
      out += message;
      out += fields;
    }
    sink().log(spdlog::level::info, std::string_view(out));
  }
};

}  // namespace

void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
void set_format(Format f) { g_format.store(static_cast<int>(f), std::memory_order_relaxed); }
Format format() { return static_cast<Format>(g_format.load(std::memory_order_relaxed)); }

void set_component(std::string_view c) {
  std::lock_guard<std::mutex> lock(g_component_mu);
  g_component = std::string(c);
}

Result<Level> parse_level(std::string_view text) {
  if (text == "warning") return Level::kWarn;
  for (int i = 0; i <= static_cast<int>(Level::kOff); ++i)
    if (text == kNames[i]) return static_cast<Level>(i);
  return invalid_argument(
      fmt::format("unknown log level '{}'; choose debug, info, warn, error or off", std::string(text)));
}

Result<Format> parse_format(std::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return invalid_argument(fmt::format("unknown log format '{}'; choose text or json", std::string(text)));
}

void write(Level l, std::string_view message, const Fields& fields) {
  if (l < level() || l == Level::kOff) return;
  Line line(l, fields);
  line.finish(message);
}

void access(const Access& a) {
  if (level() > Level::kInfo) return;
  Line line(Level::kInfo, {a.request_id, a.trace_id});
  line.add("method", a.method);
  line.add("route", a.route);
  if (!a.model.empty()) line.add("model", a.model);
  line.add_number("status", a.status, 0);
  if (a.prompt_tokens >= 0) line.add_number("prompt_tokens", static_cast<double>(a.prompt_tokens), 0);
  if (a.completion_tokens >= 0) line.add_number("completion_tokens", static_cast<double>(a.completion_tokens), 0);
  if (a.ttft_ms >= 0) line.add_number("ttft_ms", a.ttft_ms, 1);
  if (a.total_ms >= 0) line.add_number("total_ms", a.total_ms, 1);
  if (!a.remote.empty()) line.add("remote", a.remote);
  line.finish("access");
}

}  // namespace tessera::log
