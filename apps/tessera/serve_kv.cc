#include "serve_kv.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string_view>

#include <fmt/core.h>

#include "base/log.h"
#include "kv/host/host_connector.h"
#include "kv/host/model_identity.h"
#include "kv/pool/pool_connector.h"
#include "kv/registry.h"

namespace tessera::cli {

bool serve_keeps_kv_blocks(const ServeArgs& a) {
  return a.kv_host_memory_mib > 0 || !a.kv_disk_dir.empty() || a.kv_pool_memory_mib > 0;
}

Status attach_kv_tiers(engine::Engine& engine, const ServeArgs& a, const model::ModelConfig& config,
                       const model::ModelWeights& weights, const std::string& backend, const std::string& link_host,
                       const ClusterToken& token, const ctrl::StoreAuth& store_auth) {
  // KV beyond device memory: blocks the cache evicts go to host memory, then to disk (kv/host/host_connector.h).
  // Added before the PD service's pd-link connector, so that a remote prefill starts after what the tiers hold.
  if (a.kv_disk_size_mib > 0 && a.kv_disk_dir.empty()) return invalid_argument("--kv-disk-size needs --kv-disk-dir");
  std::string identity;
  if (!a.kv_disk_dir.empty() || a.kv_pool_memory_mib > 0)
    identity = kv::model_identity(
        config, weights,
        fmt::format("backend={} weight_dtype={}", backend, a.weight_dtype.empty() ? "stored" : a.weight_dtype));
  if (a.kv_host_memory_mib > 0 || !a.kv_disk_dir.empty()) {
    kv::HostOptions ho;
    ho.host_bytes = static_cast<size_t>(a.kv_host_memory_mib * 1024 * 1024);
    ho.disk_dir = a.kv_disk_dir;
    ho.disk_bytes = static_cast<size_t>(a.kv_disk_size_mib * 1024 * 1024);
    kv::ConnectorSpec spec;
    spec.model_identity = identity;
    spec.options = ho;
    TS_ASSIGN_OR_RETURN(auto host, kv::make_connector(kv::kHostConnector, spec));
    TS_RETURN_IF_ERROR(engine.add_connector(host));
    log::info("KV tiers: {:g} MiB host memory{}", a.kv_host_memory_mib,
              a.kv_disk_dir.empty() ? std::string()
                                    : fmt::format(", {:g} MiB on disk in {}", a.kv_disk_size_mib, a.kv_disk_dir));
  }
  // The cluster KV pool (kv/pool/pool_connector.h): after the host tiers, before a remote prefill.
  if (a.kv_pool_memory_mib > 0) {
    if (a.ctrl.empty())
      return invalid_argument("--kv-pool-memory needs --ctrl: the control plane every node of the pool uses");
    TS_ASSIGN_OR_RETURN(std::unique_ptr<ctrl::Store> store, ctrl::make_store_from_flag(a.ctrl, store_auth));
    kv::PoolOptions po;
    po.pool_bytes = static_cast<size_t>(a.kv_pool_memory_mib * 1024 * 1024);
    po.store = std::shared_ptr<ctrl::Store>(std::move(store));
    po.lease_ttl = std::chrono::milliseconds(a.ctrl_ttl_ms);
    po.endpoints = a.link_endpoints;
    po.host = link_host;
    po.cluster_token = token;
    if (const char* f = std::getenv("TESSERA_KV_POOL_CORRUPT"); f != nullptr && std::string_view(f) == "1")
      po.corrupt_slots = true;
    kv::ConnectorSpec spec;
    spec.model_identity = identity;
    spec.options = po;
    TS_ASSIGN_OR_RETURN(auto pool, kv::make_connector(kv::kPoolConnector, spec));
    TS_RETURN_IF_ERROR(engine.add_connector(pool));
    log::info("KV pool: {:g} MiB of this node's memory in the pool of {}", a.kv_pool_memory_mib, a.ctrl);
  }
  return ok_status();
}

}  // namespace tessera::cli
