#include "ops/vulkan/vulkan_backend.h"

#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

#include "base/check.h"
#include "ops/vulkan/encode.h"
#include "ops/vulkan/gpu.h"
#include "ops/vulkan/stream.h"

namespace tessera::ops::vulkan {
namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

class VulkanDevice final : public Device {
 public:
  VulkanDevice(std::shared_ptr<Gpu> gpu, DeviceInfo info) : gpu_(std::move(gpu)), info_(std::move(info)) {}
  const DeviceInfo& info() const override { return info_; }
  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    TS_ASSIGN_OR_RETURN(std::unique_ptr<GpuBuffer> b, gpu_->create_buffer(bytes, MemoryKind::kDevice));
    return std::unique_ptr<Buffer>(std::move(b));
  }
  Support supports(const Op& op) const override { return capability(*gpu_, op); }
  std::unique_ptr<Stream> create_stream() override {
    auto s = VkStream::create(gpu_);
    TS_CHECK(s.ok());  // a command pool and 16 bytes failing now is a broken driver
    return std::move(s).value();
  }

 private:
  std::shared_ptr<Gpu> gpu_;
  DeviceInfo info_;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::shared_ptr<Instance> instance) : instance_(std::move(instance)) {}
  std::string_view name() const override { return "vulkan"; }
  int device_count() const override { return static_cast<int>(instance_->devices().size()); }
  Result<std::unique_ptr<Device>> open_device(int index) override { return open_device_with(index, {}); }
  Result<std::unique_ptr<Device>> open_device_with(int index, const DeviceOptions& options) override {
    (void)options;  // lavapipe sizes its thread pool from LP_NUM_THREADS, read by the driver itself
    if (index < 0 || index >= device_count()) return not_found(fmt::format("vulkan has no device {}", index));
    GpuOptions go;
    go.force_staging = env_is("TESSERA_VULKAN_STAGING", "1");
    go.subgroups = !env_is("TESSERA_VULKAN_SUBGROUPS", "off");
    TS_ASSIGN_OR_RETURN(std::shared_ptr<Gpu> gpu, Gpu::create(instance_, index, go));
    DeviceInfo info;
    info.backend = "vulkan";
    info.name = gpu->describe_short();
    info.memory_bytes = gpu->info().device_local_bytes();
    info.host_visible = gpu->host_visible();
    info.supports_graphs = true;  // VkStream::record
    return std::unique_ptr<Device>(new VulkanDevice(std::move(gpu), std::move(info)));
  }
  Result<std::vector<DeviceDescription>> describe_devices() override {
    std::vector<DeviceDescription> out;
    for (int i = 0; i < device_count(); ++i) out.push_back(describe(instance_->devices()[static_cast<size_t>(i)], i));
    return out;
  }

 private:
  std::shared_ptr<Instance> instance_;
};

}  // namespace

Result<std::unique_ptr<Backend>> create_backend() {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Instance> instance, Instance::create());
  return std::unique_ptr<Backend>(new VulkanBackend(std::move(instance)));
}

}  // namespace tessera::ops::vulkan
