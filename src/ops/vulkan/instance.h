// The Vulkan instance and what each physical device reports: the discovery half of the vulkan backend.
//
// Instance::create() loads the Vulkan loader's instance and reads every physical device's properties,
// memory heaps and types, queue families and subgroup support once; describe() turns one device's into the
// vulkaninfo-style listing of `tessera inspect --devices`.
//
// Internal to src/ops/vulkan. Thread-safety: immutable after create().
#pragma once

#include <vulkan/vulkan.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::vulkan {

std::string vk_error(const char* what, VkResult r);  // "vulkan: WHAT failed (VK_ERROR_...)"

struct PhysicalInfo {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props{};
  VkPhysicalDeviceMemoryProperties memory{};
  VkPhysicalDeviceFeatures features{};
  std::vector<VkQueueFamilyProperties> queues;
  int compute_family = -1;  // the first family with compute; -1: the device cannot run compute shaders
  // Vulkan 1.1+ devices only (zero otherwise).
  uint32_t subgroup_size = 0;
  VkSubgroupFeatureFlags subgroup_ops = 0;
  VkShaderStageFlags subgroup_stages = 0;
  VkDeviceSize max_allocation = 0;  // maxMemoryAllocationSize; 0 when not reported
  std::string driver;               // driver name and info where the device reports them (1.2+)

  // Subgroup arithmetic (subgroupAdd) in compute shaders: what matmul_vec's subgroup build needs.
  bool subgroup_arithmetic() const;
  std::string type_name() const;            // "discrete GPU", "integrated GPU", "cpu", ...
  std::string api_version() const;          // "1.3.230"
  VkDeviceSize device_local_bytes() const;  // the largest device-local heap
};

class Instance {
 public:
  // Unavailable with the reason when there is no loader, no driver or no device.
  static Result<std::shared_ptr<Instance>> create();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  uint32_t api_version() const { return api_version_; }
  // Discrete GPUs first, then integrated, virtual, other and CPU devices (lavapipe last); the loader's order
  // within each kind.
  const std::vector<PhysicalInfo>& devices() const { return devices_; }

 private:
  Instance() = default;
  VkInstance instance_ = VK_NULL_HANDLE;
  uint32_t api_version_ = VK_API_VERSION_1_0;
  std::vector<PhysicalInfo> devices_;
};

// vulkaninfo's summary of one device: type, API and driver versions, memory heaps and types, subgroup size
// and operations, compute limits, and how the backend will use it (buffers, reductions).
DeviceDescription describe(const PhysicalInfo& info, int index);

}  // namespace tessera::ops::vulkan
