// The planner's decision history as the dashboard shows it. The planner (issue 18 item 2) writes its bounded
// history to the control-plane key kPlannerDecisionsKey as JSON:
//   {"updated_ms":N, "state":"acting|holding|off", "reason":"...",
//    "decisions":[{"ts_ms":N, "action":"keep|re-role|scale-out|scale-in", "node":"id", "from":"prefill",
//                  "to":"decode", "reason":"...", "predicted_gain":0.23, "applied":true}, ...]}
// (what solver::history_json writes: "from"/"to" are roles, "none" for a started or stopped node, and for a
// keep the current and the best placement described).
// A stored value is untrusted input (docs/architecture.md, Errors): parse_planner_history() checks every
// field's type and range, keeps at most kMaxPlannerDecisions (the newest), drops decisions it cannot read
// (counting them), and never throws. Pure.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::router {

inline constexpr std::string_view kPlannerDecisionsKey = "/tessera/planner/decisions";
inline constexpr size_t kMaxPlannerDecisions = 500;

// The "planner" object of /dashboard/api/state:
//   {"status":"ok", "state", "reason", "updated_ms", "decisions":[...], "dropped":N}   a value was read
//   {"status":"absent"}     the key does not exist: no planner runs
//   {"status":"invalid", "error":"..."}   the value is not a planner history (the error says why)
nlohmann::json parse_planner_history(std::string_view value);
nlohmann::json planner_absent();
// The router has no control plane: there is nowhere a planner could write.
nlohmann::json planner_no_ctrl();
// The control plane did not answer (the last good value is not shown as current).
nlohmann::json planner_unreachable(std::string_view error);

}  // namespace tessera::router
