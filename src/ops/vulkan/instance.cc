#include "ops/vulkan/instance.h"

#include <algorithm>
#include <cstring>

#include <fmt/core.h>

namespace tessera::ops::vulkan {
namespace {

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    default:
      return nullptr;
  }
}

std::string version_string(uint32_t v) {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

std::string memory_flags(VkMemoryPropertyFlags f) {
  std::string s;
  auto add = [&s](const char* name) { s += s.empty() ? name : std::string(" | ") + name; };
  if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) add("DEVICE_LOCAL");
  if (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) add("HOST_VISIBLE");
  if (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) add("HOST_COHERENT");
  if (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) add("HOST_CACHED");
  if (f & VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT) add("LAZILY_ALLOCATED");
  return s.empty() ? "none" : s;
}

std::string subgroup_ops_string(VkSubgroupFeatureFlags f) {
  std::string s;
  const std::pair<VkSubgroupFeatureFlagBits, const char*> names[] = {
      {VK_SUBGROUP_FEATURE_BASIC_BIT, "basic"},
      {VK_SUBGROUP_FEATURE_VOTE_BIT, "vote"},
      {VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, "arithmetic"},
      {VK_SUBGROUP_FEATURE_BALLOT_BIT, "ballot"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_BIT, "shuffle"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, "shuffle_relative"},
      {VK_SUBGROUP_FEATURE_CLUSTERED_BIT, "clustered"},
      {VK_SUBGROUP_FEATURE_QUAD_BIT, "quad"}};
  for (auto [bit, name] : names) {
    if (f & bit) s += s.empty() ? name : std::string(", ") + name;
  }
  return s.empty() ? "none" : s;
}

std::string mib(VkDeviceSize bytes) { return fmt::format("{} MiB ({} bytes)", bytes >> 20, bytes); }

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const VkExtensionProperties& e : exts) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 4;
    default:
      return 3;
  }
}

PhysicalInfo read_device(VkPhysicalDevice pd, uint32_t instance_api) {
  PhysicalInfo info;
  info.handle = pd;
  vkGetPhysicalDeviceProperties(pd, &info.props);
  vkGetPhysicalDeviceMemoryProperties(pd, &info.memory);
  vkGetPhysicalDeviceFeatures(pd, &info.features);
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  info.queues.resize(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, info.queues.data());
  for (uint32_t i = 0; i < n; ++i) {
    if (info.queues[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      info.compute_family = static_cast<int>(i);
      break;
    }
  }
  // Properties2 is core in 1.1 (instance and device both).
  const uint32_t api = std::min(instance_api, info.props.apiVersion);
  if (api >= VK_API_VERSION_1_1) {
    VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    sub.pNext = &m3;
    if (api >= VK_API_VERSION_1_2) m3.pNext = &drv;
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sub;
    vkGetPhysicalDeviceProperties2(pd, &p2);
    info.subgroup_size = sub.subgroupSize;
    info.subgroup_ops = sub.supportedOperations;
    info.subgroup_stages = sub.supportedStages;
    info.max_allocation = m3.maxMemoryAllocationSize;
    if (api >= VK_API_VERSION_1_2 && drv.driverName[0] != '\0')
      info.driver = fmt::format("{} ({})", drv.driverName, drv.driverInfo);
  }
  return info;
}

}  // namespace

std::string vk_error(const char* what, VkResult r) {
  const char* name = result_name(r);
  return name ? fmt::format("vulkan: {} failed ({})", what, name)
              : fmt::format("vulkan: {} failed (VkResult {})", what, static_cast<int>(r));
}

bool PhysicalInfo::subgroup_arithmetic() const {
  return subgroup_size > 0 && (subgroup_ops & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
         (subgroup_ops & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) && (subgroup_stages & VK_SHADER_STAGE_COMPUTE_BIT);
}

std::string PhysicalInfo::type_name() const {
  switch (props.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

std::string PhysicalInfo::api_version() const { return version_string(props.apiVersion); }

VkDeviceSize PhysicalInfo::device_local_bytes() const {
  VkDeviceSize best = 0;
  for (uint32_t i = 0; i < memory.memoryHeapCount; ++i) {
    if (memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      best = std::max(best, memory.memoryHeaps[i].size);
  }
  return best;
}

Result<std::shared_ptr<Instance>> Instance::create() {
  std::shared_ptr<Instance> inst(new Instance());
  // vkEnumerateInstanceVersion is 1.1; a 1.0 loader lacks it.
  auto enumerate_version =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  uint32_t loader = VK_API_VERSION_1_0;
  if (enumerate_version) enumerate_version(&loader);
  inst->api_version_ = std::min<uint32_t>(loader, VK_API_VERSION_1_2);

  uint32_t n_ext = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vkEnumerateInstanceExtensionProperties(nullptr, &n_ext, exts.data());
  std::vector<const char*> enable;
  VkInstanceCreateFlags flags = 0;
  // Portability drivers (MoltenVK) are listed only to instances that ask for them.
  if (has_extension(exts, "VK_KHR_portability_enumeration")) {
    enable.push_back("VK_KHR_portability_enumeration");
    flags |= 0x00000001;  // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tessera";
  app.pEngineName = "tessera";
  app.apiVersion = inst->api_version_;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.flags = flags;
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  ci.ppEnabledExtensionNames = enable.data();
  VkResult r = vkCreateInstance(&ci, nullptr, &inst->instance_);
  if (r != VK_SUCCESS) {
    inst->instance_ = VK_NULL_HANDLE;
    return unavailable(vk_error("vkCreateInstance", r) +
                       "; install a Vulkan driver (mesa-vulkan-drivers provides lavapipe, a CPU device)");
  }
  uint32_t n = 0;
  r = vkEnumeratePhysicalDevices(inst->instance_, &n, nullptr);
  if (r != VK_SUCCESS) return unavailable(vk_error("vkEnumeratePhysicalDevices", r));
  std::vector<VkPhysicalDevice> pds(n);
  vkEnumeratePhysicalDevices(inst->instance_, &n, pds.data());
  for (VkPhysicalDevice pd : pds) inst->devices_.push_back(read_device(pd, inst->api_version_));
  // Device 0 is the one a caller gets by default: a real GPU before a software one.
  std::stable_sort(inst->devices_.begin(), inst->devices_.end(), [](const PhysicalInfo& a, const PhysicalInfo& b) {
    return type_rank(a.props.deviceType) < type_rank(b.props.deviceType);
  });
  if (inst->devices_.empty()) {
    return unavailable(
        "vulkan: the loader found no Vulkan device; install a driver (mesa-vulkan-drivers provides lavapipe)");
  }
  return inst;
}

Instance::~Instance() {
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

DeviceDescription describe(const PhysicalInfo& info, int index) {
  DeviceDescription d;
  const VkPhysicalDeviceLimits& l = info.props.limits;
  d.title = fmt::format("vulkan device {}: {}", index, info.props.deviceName);
  auto add = [&d](std::string k, std::string v) { d.properties.emplace_back(std::move(k), std::move(v)); };
  add("deviceType", info.type_name());
  add("apiVersion", info.api_version());
  add("driverVersion", fmt::format("{:#x}", info.props.driverVersion));
  if (!info.driver.empty()) add("driver", info.driver);
  add("vendorID / deviceID", fmt::format("{:#06x} / {:#06x}", info.props.vendorID, info.props.deviceID));
  for (uint32_t i = 0; i < info.memory.memoryHeapCount; ++i) {
    const VkMemoryHeap& h = info.memory.memoryHeaps[i];
    add(fmt::format("memoryHeaps[{}]", i),
        fmt::format("{}{}", mib(h.size), h.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? ", DEVICE_LOCAL" : ""));
  }
  for (uint32_t i = 0; i < info.memory.memoryTypeCount; ++i) {
    const VkMemoryType& t = info.memory.memoryTypes[i];
    add(fmt::format("memoryTypes[{}]", i), fmt::format("heap {}: {}", t.heapIndex, memory_flags(t.propertyFlags)));
  }
  if (info.max_allocation > 0) add("maxMemoryAllocationSize", mib(info.max_allocation));
  add("subgroupSize", info.subgroup_size ? std::to_string(info.subgroup_size) : "not reported (Vulkan 1.0)");
  add("subgroup operations", subgroup_ops_string(info.subgroup_ops));
  add("subgroups in compute", info.subgroup_stages & VK_SHADER_STAGE_COMPUTE_BIT ? "yes" : "no");
  add("maxComputeWorkGroupSize", fmt::format("{} x {} x {}", l.maxComputeWorkGroupSize[0], l.maxComputeWorkGroupSize[1],
                                             l.maxComputeWorkGroupSize[2]));
  add("maxComputeWorkGroupInvocations", std::to_string(l.maxComputeWorkGroupInvocations));
  add("maxComputeWorkGroupCount", fmt::format("{} x {} x {}", l.maxComputeWorkGroupCount[0],
                                              l.maxComputeWorkGroupCount[1], l.maxComputeWorkGroupCount[2]));
  add("maxComputeSharedMemorySize", std::to_string(l.maxComputeSharedMemorySize));
  add("maxStorageBufferRange", mib(l.maxStorageBufferRange));
  add("minStorageBufferOffsetAlignment", std::to_string(l.minStorageBufferOffsetAlignment));
  add("maxPushConstantsSize", std::to_string(l.maxPushConstantsSize));
  add("shaderFloat64 / shaderInt64",
      fmt::format("{} / {}", info.features.shaderFloat64 ? "yes" : "no", info.features.shaderInt64 ? "yes" : "no"));
  add("compute queue family", info.compute_family >= 0
                                  ? fmt::format("{} ({} queues)", info.compute_family,
                                                info.queues[static_cast<size_t>(info.compute_family)].queueCount)
                                  : std::string("none: tessera cannot use this device"));
  add("tessera matmul reductions", info.subgroup_arithmetic() ? "subgroup arithmetic" : "shared memory");
  return d;
}

}  // namespace tessera::ops::vulkan
