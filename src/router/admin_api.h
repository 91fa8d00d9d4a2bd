// The router's node management API (/admin/nodes*, gateway.h), its JSON: a node's status as listed, and the
// {"url": ...} bodies the add, remove and drain calls take.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "router/node_registry.h"

namespace tessera::router {

nlohmann::json node_status_json(const NodeStatus& s);

// The normalised node URL of an admin body, and the body; InvalidArgument saying what is expected.
Result<std::pair<std::string, nlohmann::json>> parse_admin_body(std::string_view body);

}  // namespace tessera::router
