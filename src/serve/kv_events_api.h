// GET /internal/kv/events (api/kv_events.h): the node's KV events (engine/kv_events.h) for the router's exact prefix
// index, behind the cluster credential like every /internal/ route. A missing or malformed epoch/after reads from
// the start (a reset).
#pragma once

#include "base/cluster_token.h"
#include "engine/kv_events.h"
#include "http/http.h"

namespace tessera::serve {

// `log` must outlive the server.
void add_kv_events_route(http::Server& server, const engine::KvEventLog& log, int block_tokens,
                         const ClusterToken& token);

}  // namespace tessera::serve
