#include <map>
#include <mutex>

#include <fmt/format.h>

#include "link/endpoint.h"

namespace tessera::link {
namespace {

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, EndpointFactory>& registry() {
  static std::map<std::string, EndpointFactory> r;
  return r;
}

}  // namespace

void register_endpoint(const std::string& name, EndpointFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry()[name] = std::move(factory);
}

Result<std::unique_ptr<Endpoint>> make_endpoint(std::string_view name, const EndpointConfig& config) {
  register_builtin_endpoints();
  EndpointFactory f;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(std::string(name));
    if (it != registry().end()) f = it->second;
  }
  if (!f)
    return invalid_argument(
        fmt::format("unknown link endpoint '{}'; known: {}", name, fmt::join(endpoint_names(), ", ")));
  return f(config);
}

std::vector<std::string> endpoint_names() {
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<std::string> names;
  for (auto& [n, f] : registry()) names.push_back(n);
  return names;
}

}  // namespace tessera::link
