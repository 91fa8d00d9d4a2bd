// Tessera's own HTTP headers (x-tessera-*), the names every process reads and writes. All of them are
// internal: a node honours them only from holders of the cluster credential (docs/security.md).
//
//   x-tessera-cluster-token  the cluster credential, on every internal call (defined in base: the link and
//                            control-plane handshakes present it too)
//   x-tessera-token-ids      "1" on a streamed request: the node adds token-id comments (api/resume.h)
//   x-tessera-prefill-node   router -> decode node: the prefill node the router paired it with
//   x-tessera-draining       "1" on a node's 503: it is alive and finishing its work, closed for new work
//   x-tessera-node           router -> client holding the cluster token: the node that answered (with
//                            x-tessera-prefill-node, a request's path through the cluster, for the fault suite's
//                            and planner-shift's accounting); public clients get neither
#pragma once

#include <string_view>

#include "base/cluster_token.h"

namespace tessera::api {

inline constexpr std::string_view kClusterTokenHeader = tessera::kClusterTokenHeader;
inline constexpr std::string_view kTokenIdsHeader = "x-tessera-token-ids";
inline constexpr std::string_view kPrefillNodeHeader = "x-tessera-prefill-node";
inline constexpr std::string_view kDrainingHeader = "x-tessera-draining";
inline constexpr std::string_view kServingNodeHeader = "x-tessera-node";

}  // namespace tessera::api
