// parse_planner_history (planner_view.h): JsonFields for every read, so a string where a number belongs, a
// NaN, a 10 MB reason or an unknown action is refused by name instead of reaching the page.
#include "router/dashboard/planner_view.h"

#include <array>
#include <cmath>
#include <vector>

#include <fmt/core.h>

#include "base/json_fields.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxText = 1024;      // reason, node id
constexpr int64_t kMaxMs = 1LL << 52;  // a millisecond timestamp the page can hold exactly (a double)
constexpr std::array<std::string_view, 3> kStates = {"acting", "holding", "off"};
constexpr std::array<std::string_view, 4> kActions = {"keep", "re-role", "scale-out", "scale-in"};

template <size_t N>
bool one_of(const std::string& s, const std::array<std::string_view, N>& allowed) {
  for (auto a : allowed) {
    if (s == a) return true;
  }
  return false;
}

json invalid(std::string error) { return {{"status", "invalid"}, {"error", std::move(error)}}; }

// One decision, or null when it cannot be read.
json decision(const json& d) {
  JsonFields f(d, "decision");
  json out;
  out["ts_ms"] = f.integer("ts_ms", 0, kMaxMs);
  out["action"] = f.string("action", 32);
  out["node"] = f.string("node", kMaxText, std::string());
  // Roles for a move ("none" for a node started or stopped); a keep names the current and the best placements.
  out["from"] = f.string("from", kMaxText, std::string());
  out["to"] = f.string("to", kMaxText, std::string());
  out["reason"] = f.string("reason", kMaxText, std::string());
  const bool has_gain = f.has("predicted_gain");
  const double gain = f.number("predicted_gain", -1e6, 1e6, 0.0);
  out["predicted_gain"] = has_gain ? json(gain) : json(nullptr);
  out["applied"] = f.boolean("applied", false);
  if (!f.ok() || !one_of(out["action"].get<std::string>(), kActions)) {
    return nullptr;
  }
  return out;
}

}  // namespace

json parse_planner_history(std::string_view value) {
  const json j = json::parse(value, nullptr, false);
  if (j.is_discarded()) return invalid("the value is not JSON");
  JsonFields f(j, "planner history");
  const int64_t updated = f.integer("updated_ms", 0, kMaxMs);
  const std::string state = f.string("state", 16);
  const std::string reason = f.string("reason", kMaxText, std::string());
  const json* decisions = f.array("decisions", 1u << 20);
  if (!f.ok()) return invalid(f.status().message());
  if (!one_of(state, kStates)) return invalid(fmt::format("state '{}' is not acting, holding or off", state));
  json out = {{"status", "ok"}, {"updated_ms", updated}, {"state", state}, {"reason", reason}};
  json list = json::array();
  int64_t dropped = 0;
  const size_t n = decisions->size();
  const size_t first = n > kMaxPlannerDecisions ? n - kMaxPlannerDecisions : 0;
  dropped += static_cast<int64_t>(first);
  for (size_t i = first; i < n; ++i) {
    json d = decision((*decisions)[i]);
    if (d.is_null()) {
      ++dropped;
    } else {
      list.push_back(std::move(d));
    }
  }
  out["decisions"] = std::move(list);
  out["dropped"] = dropped;
  return out;
}

json planner_absent() { return {{"status", "absent"}}; }
json planner_no_ctrl() { return {{"status", "no_ctrl"}}; }
json planner_unreachable(std::string_view error) { return {{"status", "unreachable"}, {"error", std::string(error)}}; }

}  // namespace tessera::router
