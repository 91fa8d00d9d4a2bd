// The router's node management API (/admin/nodes*, gateway.h): its routes, and their JSON: a node's status as
// listed, and the {"url": ...} bodies the add, remove and drain calls take.
//
// Thread-safety: the JSON functions are pure; the routes call into the gateway's registry and membership calls,
// which are thread-safe.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/kv_events.h"
#include "base/status.h"
#include "http/http.h"
#include "router/membership.h"
#include "router/node_registry.h"

namespace tessera::router {

nlohmann::json node_status_json(const NodeStatus& s);

// The normalised node URL of an admin body, and the body; InvalidArgument saying what is expected.
Result<std::pair<std::string, nlohmann::json>> parse_admin_body(std::string_view body);

// What the admin routes act on (the gateway's own objects and calls).
struct AdminTarget {
  NodeRegistry* registry = nullptr;
  std::string strategy;  // named in the listing
  std::function<void(const NodeSpec&)> add_node;
  std::function<bool(const std::string& url)> remove_node;  // false: not registered
  // The KV blocks a node's events say it holds, per tier (device, host, disk); nullopt (or unset) when KV events are
  // not read.
  std::function<std::optional<std::array<size_t, api::kKvTiers>>(const std::string& url)> kv_event_blocks;
  // ... and, for a hybrid model's node, the blocks after which it holds the recurrent state (nullopt otherwise).
  std::function<std::optional<std::array<size_t, api::kKvTiers>>(const std::string& url)> kv_event_states;
};

// Mounts GET /admin/nodes (the listing), POST /admin/nodes (add; optional positive "capacity"), POST
// /admin/nodes/remove and POST /admin/nodes/drain (optional boolean "drain", default true) on `server`, each behind
// `guard` (the credential check the gateway applies to /admin/*). Bad bodies get 400, an unknown node 404, a node
// added twice 409.
void mount_admin_routes(http::Server& server, AdminTarget target,
                        const std::function<http::Handler(http::Handler)>& guard);

}  // namespace tessera::router
