// KV connectors by name (base/registry.h): each connector under src/kv/<name>/ registers a factory from
// register_builtin_connectors(), and callers make one by name: `tessera serve` the `host` connector for
// --kv-host-memory / --kv-disk-dir, the PD service the `pd-link` connector. An unknown name lists the known ones.
//
// Writing a connector (docs/kv.md): implement engine::KvConnector in src/kv/<name>/, take your options as
// ConnectorSpec::options (a type of your own, checked by your factory), add one line to register_builtin_connectors()
// in registry.cc.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <any>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "engine/kv_connector.h"

namespace tessera::kv {

struct ConnectorSpec {
  // Who the KV belongs to, for tiers that outlive the process (kv/host's disk files): the model's identity
  // (model_identity(): its configuration and weights).
  std::string model_identity;
  // The connector's own options (kv::HostOptions, kv::PdLinkOptions, ...); a factory refuses a type it does not
  // take with InvalidArgument.
  std::any options;
};

using ConnectorFactory = std::function<Result<std::shared_ptr<engine::KvConnector>>(const ConnectorSpec&)>;
using ConnectorRegistry = Registry<ConnectorFactory>;

ConnectorRegistry& connector_registry();
// Registers host, pd-link and pool (idempotent).
void register_builtin_connectors();
Result<std::shared_ptr<engine::KvConnector>> make_connector(std::string_view name, const ConnectorSpec& spec);
std::vector<std::string> connector_names();

// The options of type T in `spec`, or InvalidArgument naming the connector.
template <class T>
Result<T> connector_options(const ConnectorSpec& spec, std::string_view connector) {
  if (!spec.options.has_value()) return T{};
  if (const T* o = std::any_cast<T>(&spec.options)) return *o;
  return invalid_argument(std::string("the '") + std::string(connector) +
                          "' KV connector was given options of another kind");
}

}  // namespace tessera::kv
