#include <mutex>

#include <fmt/format.h>

#include "ctrl/store.h"

namespace tessera::ctrl {

std::unique_ptr<Store> make_embedded_store(const std::string& endpoint, const StoreAuth& auth);
Result<std::unique_ptr<Store>> make_etcd_store(const std::string& endpoints, const StoreAuth& auth);

StoreRegistry& store_registry() {
  static StoreRegistry r("ctrl store");
  return r;
}

Status register_store(const std::string& kind, StoreFactory factory) {
  return store_registry().add(kind, std::move(factory));
}

void register_builtin_stores() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)register_store("embedded", [](const std::string& e, const StoreAuth& a) -> Result<std::unique_ptr<Store>> {
      return make_embedded_store(e, a);
    });
    (void)register_store("etcd", [](const std::string& e, const StoreAuth& a) -> Result<std::unique_ptr<Store>> {
      return make_etcd_store(e, a);
    });
  });
}

Result<std::unique_ptr<Store>> make_store(const std::string& kind, const std::string& endpoint, const StoreAuth& auth) {
  register_builtin_stores();
  TS_ASSIGN_OR_RETURN(StoreRegistry::Entry e, store_registry().find(kind));
  if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
    return invalid_argument(fmt::format("ctrl store endpoint '{}' must be an http:// or https:// URL", endpoint));
  }
  return e.factory(endpoint, auth);
}

Result<std::unique_ptr<Store>> make_store(const std::string& spec, const StoreAuth& auth) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return invalid_argument(fmt::format("ctrl store '{}' must be KIND=URL, e.g. embedded=http://127.0.0.1:7070", spec));
  }
  return make_store(spec.substr(0, eq), spec.substr(eq + 1), auth);
}

Result<std::unique_ptr<Store>> make_store_from_flag(const std::string& flag, const StoreAuth& auth) {
  if (flag.rfind("http://", 0) == 0 || flag.rfind("https://", 0) == 0) return make_store("embedded", flag, auth);
  return make_store(flag, auth);
}

}  // namespace tessera::ctrl
