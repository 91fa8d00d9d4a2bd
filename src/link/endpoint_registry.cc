#include "base/registry.h"
#include "link/endpoint.h"

namespace tessera::link {

EndpointRegistry& endpoint_registry() {
  static EndpointRegistry r("link endpoint");
  return r;
}

Status register_endpoint(const std::string& name, EndpointFactory factory) {
  return endpoint_registry().add(name, std::move(factory));
}

Result<std::unique_ptr<Endpoint>> make_endpoint(std::string_view name, const EndpointConfig& config) {
  register_builtin_endpoints();
  TS_ASSIGN_OR_RETURN(EndpointRegistry::Entry e, endpoint_registry().find(name));
  return e.factory(config);
}

std::vector<std::string> endpoint_names() {
  register_builtin_endpoints();
  return endpoint_registry().names();
}

}  // namespace tessera::link
