#include "link/faulty/fault_schedule.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace tessera::link {
namespace {

constexpr std::string_view kForms =
    "expected comma-separated items over=ENDPOINT, seed=N, delay_ms=N, or ACTION=SELECTOR with ACTION one of "
    "drop, delay, corrupt, disconnect and SELECTOR one of nth:N, every:N, first:N, after:N, p:F";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_u64(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

Status bad(std::string_view item, std::string_view why) {
  return invalid_argument(fmt::format("bad link fault item '{}': {}; {}", item, why, kForms));
}

}  // namespace

std::string_view fault_action_name(FaultAction action) {
  switch (action) {
    case FaultAction::kDrop:
      return "drop";
    case FaultAction::kDelay:
      return "delay";
    case FaultAction::kCorrupt:
      return "corrupt";
    case FaultAction::kDisconnect:
      return "disconnect";
  }
  return "?";
}

Result<FaultSpec> parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(at, comma - at));
    at = comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad(item, "no '='");
    std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    if (key == "over") {
      if (value.empty() || value == "faulty") return bad(item, "the carrying endpoint must be a real one (tcp, shm)");
      spec.over = std::string(value);
      continue;
    }
    if (key == "seed") {
      if (!parse_u64(value, spec.seed)) return bad(item, "the seed is not a non-negative integer");
      continue;
    }
    if (key == "delay_ms") {
      uint64_t ms = 0;
      if (!parse_u64(value, ms) || ms > 600000) return bad(item, "delay_ms must be 0..600000");
      spec.delay_ms = static_cast<int>(ms);
      continue;
    }
    FaultRule rule;
    if (key == "drop") {
      rule.action = FaultAction::kDrop;
    } else if (key == "delay") {
      rule.action = FaultAction::kDelay;
    } else if (key == "corrupt") {
      rule.action = FaultAction::kCorrupt;
    } else if (key == "disconnect") {
      rule.action = FaultAction::kDisconnect;
    } else {
      return bad(item, fmt::format("unknown key '{}'", key));
    }
    size_t colon = value.find(':');
    if (colon == std::string_view::npos) return bad(item, "the selector has no ':'");
    std::string_view kind = value.substr(0, colon), arg = value.substr(colon + 1);
    if (kind == "p") {
      std::string s(arg);
      char* end = nullptr;
      rule.p = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(rule.p) || rule.p < 0 || rule.p > 1) {
        return bad(item, "p: needs a probability in [0, 1]");
      }
      rule.kind = FaultRule::Kind::kProbability;
    } else {
      if (!parse_u64(arg, rule.n)) return bad(item, "the selector needs a non-negative integer");
      if (kind == "nth") {
        rule.kind = FaultRule::Kind::kNth;
      } else if (kind == "every") {
        rule.kind = FaultRule::Kind::kEvery;
      } else if (kind == "first") {
        rule.kind = FaultRule::Kind::kFirst;
      } else if (kind == "after") {
        rule.kind = FaultRule::Kind::kAfter;
      } else {
        return bad(item, fmt::format("unknown selector '{}'", kind));
      }
      if ((rule.kind == FaultRule::Kind::kNth || rule.kind == FaultRule::Kind::kEvery) && rule.n == 0) {
        return bad(item, "operations are numbered from 1");
      }
    }
    spec.rules.push_back(rule);
  }
  return spec;
}

uint64_t fault_hash(uint64_t seed, uint64_t n, uint64_t salt) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull ^ (n + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^ salt;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

FaultDecision decide(const FaultSpec& spec, uint64_t n) {
  FaultDecision d;
  for (const FaultRule& r : spec.rules) {
    bool hit = false;
    switch (r.kind) {
      case FaultRule::Kind::kNth:
        hit = n == r.n;
        break;
      case FaultRule::Kind::kEvery:
        hit = n % r.n == 0;
        break;
      case FaultRule::Kind::kFirst:
        hit = n <= r.n;
        break;
      case FaultRule::Kind::kAfter:
        hit = n > r.n;
        break;
      case FaultRule::Kind::kProbability:
        // The top 53 bits as a uniform double in [0, 1).
        hit =
            static_cast<double>(fault_hash(spec.seed, n, static_cast<uint64_t>(r.action) + 1) >> 11) * 0x1.0p-53 < r.p;
        break;
    }
    if (!hit) continue;
    switch (r.action) {
      case FaultAction::kDrop:
        d.drop = true;
        break;
      case FaultAction::kDelay:
        d.delay = true;
        break;
      case FaultAction::kCorrupt:
        d.corrupt = true;
        break;
      case FaultAction::kDisconnect:
        d.disconnect = true;
        break;
    }
  }
  return d;
}

}  // namespace tessera::link
