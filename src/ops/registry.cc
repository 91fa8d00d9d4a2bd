#include "ops/registry.h"

#include <fmt/format.h>

namespace tessera::ops {

BackendRegistry& BackendRegistry::global() {
  static BackendRegistry registry;
  return registry;
}

Result<std::unique_ptr<Backend>> BackendRegistry::create(const std::string& name) const {
  TS_ASSIGN_OR_RETURN(Entry e, find(name));
  return e.factory();
}

Result<std::vector<DeviceDescription>> Backend::describe_devices() {
  std::vector<DeviceDescription> out;
  for (int i = 0; i < device_count(); ++i) {
    TS_ASSIGN_OR_RETURN(std::unique_ptr<Device> d, open_device(i));
    const DeviceInfo& info = d->info();
    out.push_back({fmt::format("{} device {}: {}", name(), i, info.name),
                   {{"memory", fmt::format("{} MiB", info.memory_bytes >> 20)},
                    {"host-visible buffers", info.host_visible ? "yes" : "no"},
                    {"graphs (record and replay)", info.supports_graphs ? "yes" : "no"}}});
  }
  return out;
}

Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index) {
  return open_device(backend, index, DeviceOptions{});
}

Result<std::unique_ptr<Device>> open_device(const std::string& backend, int index, const DeviceOptions& options) {
  register_builtin_backends();
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, BackendRegistry::global().create(backend));
  if (index < 0 || index >= b->device_count()) {
    return not_found(
        fmt::format("backend '{}' has {} device(s); there is no device {}", backend, b->device_count(), index));
  }
  return b->open_device_with(index, options);
}

}  // namespace tessera::ops
