#include "api/trace_context.h"

#include <random>

#include <fmt/format.h>

namespace tessera::api {
namespace {

bool lower_hex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  bool nonzero = false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero = nonzero || c != '0';
  }
  return nonzero || n == 2;  // the flags may be 00
}

std::string random_hex(size_t digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  while (out.size() < digits) out += fmt::format("{:016x}", rng());
  out.resize(digits);
  if (out.find_first_not_of('0') == std::string::npos) out.back() = '1';
  return out;
}

}  // namespace

std::optional<TraceContext> TraceContext::parse(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags; version ff is invalid; versions above 00 may append fields.
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  const std::string_view version = h.substr(0, 2);
  if (!lower_hex(version, 2) || version == "ff") return std::nullopt;
  if (version == "00" && h.size() != 55) return std::nullopt;
  if (h.size() > 55 && h[55] != '-') return std::nullopt;
  TraceContext t;
  if (!lower_hex(h.substr(3, 32), 32) || !lower_hex(h.substr(36, 16), 16) || !lower_hex(h.substr(53, 2), 2))
    return std::nullopt;
  t.trace_id = std::string(h.substr(3, 32));
  t.parent_id = std::string(h.substr(36, 16));
  t.flags = std::string(h.substr(53, 2));
  return t;
}

TraceContext TraceContext::fresh() { return {random_hex(32), random_hex(16), "01"}; }

TraceContext TraceContext::child() const { return {trace_id, random_hex(16), flags}; }

std::string TraceContext::header() const { return fmt::format("00-{}-{}-{}", trace_id, parent_id, flags); }

TraceContext trace_of(std::string_view header) {
  if (auto t = TraceContext::parse(header)) return *t;
  return TraceContext::fresh();
}

std::string request_id_of(std::string_view incoming, std::string_view prefix) {
  bool usable = !incoming.empty() && incoming.size() <= 200;
  for (char c : incoming) usable = usable && c > ' ' && c <= '~';
  if (usable) return std::string(incoming);
  return fmt::format("{}-{}", prefix, random_hex(16));
}

}  // namespace tessera::api
