#include "api/roles.h"

#include <fmt/format.h>

namespace tessera::api {

std::string_view role_name(NodeRole role) {
  switch (role) {
    case NodeRole::kPrefill:
      return "prefill";
    case NodeRole::kDecode:
      return "decode";
    case NodeRole::kBoth:
      break;
  }
  return "both";
}

Result<NodeRole> parse_role(std::string_view name) {
  for (NodeRole r : {NodeRole::kBoth, NodeRole::kPrefill, NodeRole::kDecode}) {
    if (name == role_name(r)) return r;
  }
  return invalid_argument(fmt::format("unknown role '{}'; roles: prefill, decode, both", name));
}

}  // namespace tessera::api
