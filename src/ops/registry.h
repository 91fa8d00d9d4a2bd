// The backend registry (a base/registry.h Registry, as every plug-in kind): backends register a factory by
// name; callers ask by name.
//
// register_builtin_backends() (registry_builtin.cc) is the one place that knows which backends were
// compiled in; a backend compiled in but unusable here (no device, no driver) registers with the reason,
// so `--backend cuda` on a machine without a GPU says why instead of "unknown backend".
//
// Thread-safety: register during start-up; lookups are safe from any thread afterwards.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>()>;

class BackendRegistry : public Registry<BackendFactory> {
 public:
  BackendRegistry() : Registry("backend") {}
  // The process's registry.
  static BackendRegistry& global();
  // NotFound listing the registered names; otherwise the factory's result (Unavailable with its reason).
  Result<std::unique_ptr<Backend>> create(const std::string& name) const;
};
using BackendEntry = BackendRegistry::Entry;

// Registers every backend compiled into this binary (idempotent).
void register_builtin_backends();

// Opens device `index` of backend `name`, registering the built-ins first.
Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index = 0);
Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index, const DeviceOptions& options);

}  // namespace tessera::ops
