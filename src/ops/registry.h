// The backend registry: backends register a factory by name; callers ask by name.
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

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>()>;

struct BackendEntry {
  std::string name;
  std::string description;
  BackendFactory factory;
};

class BackendRegistry {
 public:
  static BackendRegistry& global();

  // AlreadyExists when the name is taken.
  Status add(BackendEntry entry);
  std::vector<std::string> names() const;
  // NotFound listing the registered names; otherwise the factory's result (Unavailable with its reason).
  Result<std::unique_ptr<Backend>> create(const std::string& name) const;

 private:
  std::vector<BackendEntry> entries_;
};

// Registers every backend compiled into this binary (idempotent).
void register_builtin_backends();

// Opens device `index` of backend `name`, registering the built-ins first.
Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index = 0);
Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index, const DeviceOptions& options);

}  // namespace tessera::ops
