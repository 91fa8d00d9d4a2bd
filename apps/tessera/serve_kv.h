// `tessera serve`'s KV beyond the device cache, from its flags: whether the node keeps whole blocks outside it (its
// sliding-window layers then keep every position, engine/kv_cache.h), and the host/disk tiers and the cluster KV
// pool attached to the engine as connectors (docs/kv.md).
#pragma once

#include <string>

#include "base/cluster_token.h"
#include "base/status.h"
#include "ctrl/store.h"
#include "engine/engine.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "serve_flags.h"

namespace tessera::cli {

// Host or disk tiers, or the KV pool: connectors that keep whole blocks after their requests (a prefill/decode
// role's hand-off is a connector too, but moves rows of running requests only).
bool serve_keeps_kv_blocks(const ServeArgs& a);

// Attaches the host/disk tiers, then the KV pool, that the flags ask for (none: nothing). Records that outlive the
// process or leave it are keyed by the model's identity: its configuration and weights, the backend and weight type.
// A flag combination that cannot work (--kv-disk-size without --kv-disk-dir, --kv-pool-memory without --ctrl) or a
// connector that cannot start is an error naming it.
Status attach_kv_tiers(engine::Engine& engine, const ServeArgs& a, const model::ModelConfig& config,
                       const model::ModelWeights& weights, const std::string& backend, const std::string& link_host,
                       const ClusterToken& token, const ctrl::StoreAuth& store_auth);

}  // namespace tessera::cli
