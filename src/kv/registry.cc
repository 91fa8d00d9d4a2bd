#include "kv/registry.h"

#include <mutex>

#include "kv/host/host_connector.h"
#include "kv/pd_link/pd_link.h"
#include "kv/pool/pool_connector.h"

namespace tessera::kv {

ConnectorRegistry& connector_registry() {
  static ConnectorRegistry r("KV connector");
  return r;
}

void register_builtin_connectors() {
  static std::once_flag once;
  std::call_once(once, [] {
    ConnectorRegistry& r = connector_registry();
    (void)r.add(std::string(kHostConnector), make_host_connector,
                "evicted device blocks kept in host memory, then on local disk (--kv-host-memory, --kv-disk-dir)");
    (void)r.add(std::string(kPdLink), make_pd_link_connector,
                "prefill -> decode over the link: a decode node loads a prompt's KV from a prefill node");
    (void)r.add(std::string(kPoolConnector), make_pool_connector,
                "a KV pool shared by the nodes of one control plane: evicted blocks in peers' link memory "
                "(--kv-pool-memory)");
  });
}

Result<std::shared_ptr<engine::KvConnector>> make_connector(std::string_view name, const ConnectorSpec& spec) {
  register_builtin_connectors();
  TS_ASSIGN_OR_RETURN(ConnectorRegistry::Entry e, connector_registry().find(name));
  return e.factory(spec);
}

std::vector<std::string> connector_names() {
  register_builtin_connectors();
  return connector_registry().names();
}

}  // namespace tessera::kv
