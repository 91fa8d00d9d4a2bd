// Node roles: what a `tessera serve` node does in a prefill/decode deployment, as it says on
// GET /internal/pd/info and as `--role` names it.
//   both     serves whole requests (the colocated baseline)
//   prefill  computes prompts for decode nodes and sends their KV (POST /internal/pd/prefill)
//   decode   faces clients; prefills long prompts on a prefill node and decodes from the received KV
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "base/status.h"

namespace tessera::api {

enum class NodeRole { kBoth, kPrefill, kDecode };

std::string_view role_name(NodeRole role);
// InvalidArgument listing the roles for anything else.
Result<NodeRole> parse_role(std::string_view name);

}  // namespace tessera::api
