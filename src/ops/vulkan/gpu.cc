#include "ops/vulkan/gpu.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include <fmt/core.h>

namespace tessera::ops::vulkan {
namespace {

std::atomic<uint64_t> g_next_uid{1};

VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

const SpirvBlob* find_blob(std::string_view name) {
  for (const SpirvBlob& b : spirv_blobs()) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

}  // namespace

GpuBuffer::GpuBuffer(VkDevice device, std::shared_ptr<Gpu> keep, size_t size, VkBuffer buffer, VkDeviceMemory memory,
                     VkDeviceSize alloc_size, void* mapped, bool expose)
    : Buffer(size),
      device_(device),
      keep_(std::move(keep)),
      buffer_(buffer),
      memory_(memory),
      alloc_size_(alloc_size),
      mapped_(mapped),
      expose_(expose),
      uid_(g_next_uid.fetch_add(1)) {}

GpuBuffer::~GpuBuffer() {
  // A submitted command buffer may still read or write it (an owner that freed it without synchronising).
  if (keep_) keep_->wait_idle();
  VkDevice d = device_;
  if (mapped_) vkUnmapMemory(d, memory_);
  vkDestroyBuffer(d, buffer_, nullptr);
  vkFreeMemory(d, memory_, nullptr);
}

Result<std::shared_ptr<Gpu>> Gpu::create(std::shared_ptr<Instance> instance, int index, GpuOptions options) {
  std::shared_ptr<Gpu> gpu(new Gpu(std::move(instance), index));
  TS_RETURN_IF_ERROR(gpu->init(options));
  return gpu;
}

Status Gpu::init(GpuOptions options) {
  const PhysicalInfo& pi = info();
  if (pi.compute_family < 0) return unavailable(fmt::format("vulkan: {} has no compute queue", pi.props.deviceName));
  family_ = static_cast<uint32_t>(pi.compute_family);
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  VkResult r = vkCreateDevice(pi.handle, &di, nullptr, &device_);
  if (r != VK_SUCCESS) {
    device_ = VK_NULL_HANDLE;
    return unavailable(vk_error("vkCreateDevice", r));
  }
  vkGetDeviceQueue(device_, family_, 0, &queue_);

  // The subgroup build is SPIR-V 1.3: a Vulkan 1.1 instance and device.
  const uint32_t api = std::min(instance_->api_version(), pi.props.apiVersion);
  subgroups_ = options.subgroups && api >= VK_API_VERSION_1_1 && pi.subgroup_arithmetic();

  constexpr VkMemoryPropertyFlags kMapped = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const uint32_t all = (1u << pi.memory.memoryTypeCount) - 1u;
  const bool shares_host_memory = pi.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                                  pi.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  const int unified = memory_type(all, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | kMapped);
  host_visible_ = !options.force_staging && shares_host_memory && unified >= 0;
  device_type_ = host_visible_ ? unified : memory_type(all, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (device_type_ < 0) device_type_ = memory_type(all, 0);
  staging_type_ = memory_type(all, kMapped | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (staging_type_ < 0) staging_type_ = memory_type(all, kMapped);
  if (device_type_ < 0 || staging_type_ < 0)
    return unavailable(fmt::format("vulkan: {} lacks a usable memory type", pi.props.deviceName));

  VkPipelineCacheCreateInfo pc{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  r = vkCreatePipelineCache(device_, &pc, nullptr, &cache_);
  if (r != VK_SUCCESS) cache_ = VK_NULL_HANDLE;  // optional
  VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cp.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  cp.queueFamilyIndex = family_;
  r = vkCreateCommandPool(device_, &cp, nullptr, &once_pool_);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkCreateCommandPool", r));
  return ok_status();
}

Gpu::~Gpu() {
  if (!device_) return;
  vkDeviceWaitIdle(device_);
  rope_tables_.clear();
  for (auto& [key, p] : pipelines_) vkDestroyPipeline(device_, p.pipeline, nullptr);
  for (auto& [key, p] : layouts_) {
    vkDestroyPipelineLayout(device_, p.layout, nullptr);
    vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
  }
  if (once_pool_) vkDestroyCommandPool(device_, once_pool_, nullptr);
  if (cache_) vkDestroyPipelineCache(device_, cache_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

int Gpu::memory_type(uint32_t allowed, VkMemoryPropertyFlags want) const {
  const VkPhysicalDeviceMemoryProperties& m = info().memory;
  for (uint32_t i = 0; i < m.memoryTypeCount; ++i) {
    if ((allowed & (1u << i)) && (m.memoryTypes[i].propertyFlags & want) == want) return static_cast<int>(i);
  }
  return -1;
}

VkDeviceSize Gpu::range_align() const { return std::max<VkDeviceSize>(limits().minStorageBufferOffsetAlignment, 16); }

Result<std::unique_ptr<GpuBuffer>> Gpu::create_buffer(size_t bytes, MemoryKind kind, bool keep_alive) {
  const VkDeviceSize size = round_up(std::max<VkDeviceSize>(bytes, 16), 16);
  if (info().max_allocation > 0 && size > info().max_allocation) {
    return resource_exhausted(fmt::format("vulkan: {} bytes exceed the device's largest allocation of {} bytes", bytes,
                                          info().max_allocation));
  }
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkResult r = vkCreateBuffer(device_, &bi, nullptr, &buffer);
  if (r != VK_SUCCESS) return resource_exhausted(vk_error(fmt::format("vkCreateBuffer({} bytes)", bytes).c_str(), r));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, buffer, &req);
  const bool mapped = kind == MemoryKind::kStaging || host_visible_;
  int type = kind == MemoryKind::kStaging ? staging_type_ : device_type_;
  if (!(req.memoryTypeBits & (1u << type))) {
    type = memory_type(req.memoryTypeBits,
                       mapped ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0);
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = static_cast<uint32_t>(type);
  VkDeviceMemory memory = VK_NULL_HANDLE;
  r = type < 0 ? VK_ERROR_OUT_OF_DEVICE_MEMORY : vkAllocateMemory(device_, &ai, nullptr, &memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, buffer, nullptr);
    return resource_exhausted(vk_error(fmt::format("allocating {} bytes", bytes).c_str(), r));
  }
  void* ptr = nullptr;
  r = vkBindBufferMemory(device_, buffer, memory, 0);
  if (r == VK_SUCCESS && mapped) r = vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &ptr);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, buffer, nullptr);
    vkFreeMemory(device_, memory, nullptr);
    return resource_exhausted(vk_error("binding or mapping buffer memory", r));
  }
  auto buf = std::make_unique<GpuBuffer>(device_, keep_alive ? shared_from_this() : nullptr, bytes, buffer, memory,
                                         size, ptr, kind == MemoryKind::kDevice && host_visible_);
  // Zeroed, like the host backends' memory.
  if (ptr) {
    std::memset(ptr, 0, size);
  } else {
    TS_RETURN_IF_ERROR(run_once([&](VkCommandBuffer cb) { vkCmdFillBuffer(cb, buffer, 0, VK_WHOLE_SIZE, 0); }));
  }
  return buf;
}

Window Gpu::whole(const GpuBuffer& b) { return {b.handle(), b.uid(), 0, b.alloc_size(), 0}; }

Result<Window> Gpu::window(const Tensor& t) const {
  const auto& b = static_cast<const GpuBuffer&>(*t.buffer);
  if (b.alloc_size() <= max_range()) {
    Window w = whole(b);
    w.rel = static_cast<uint32_t>(t.offset);
    return w;
  }
  const VkDeviceSize start = t.offset / range_align() * range_align();
  const VkDeviceSize end = std::min<VkDeviceSize>(round_up(t.offset + t.bytes(), 16), b.alloc_size());
  if (end - start > max_range()) {
    return invalid_argument(
        fmt::format("vulkan: the tensor {} needs {} bytes of one binding; the device binds at most {}",
                    t.shape_string(), end - start, max_range()));
  }
  return Window{b.handle(), b.uid(), start, end - start, static_cast<uint32_t>(t.offset - start)};
}

Status Gpu::create_layout(Kernel k, KernelPipeline& p) {
  const KernelSpec& spec = kernel_spec(k);
  std::vector<VkDescriptorSetLayoutBinding> bindings(spec.bindings);
  for (uint32_t i = 0; i < spec.bindings; ++i) {
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = spec.bindings;
  li.pBindings = bindings.data();
  VkResult r = vkCreateDescriptorSetLayout(device_, &li, nullptr, &p.set_layout);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkCreateDescriptorSetLayout", r));
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, spec.push_bytes};
  VkPipelineLayoutCreateInfo pi{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pi.setLayoutCount = 1;
  pi.pSetLayouts = &p.set_layout;
  pi.pushConstantRangeCount = 1;
  pi.pPushConstantRanges = &range;
  r = vkCreatePipelineLayout(device_, &pi, nullptr, &p.layout);
  if (r != VK_SUCCESS) {
    vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
    return internal_error(vk_error("vkCreatePipelineLayout", r));
  }
  p.bindings = spec.bindings;
  p.push_bytes = spec.push_bytes;
  return ok_status();
}

Result<const KernelPipeline*> Gpu::pipeline(Kernel k, uint32_t dtype) {
  const KernelSpec& spec = kernel_spec(k);
  if (!spec.typed) dtype = 0;
  std::lock_guard<std::mutex> lock(pipeline_mu_);
  if (auto it = pipelines_.find({k, dtype}); it != pipelines_.end()) return &it->second;
  auto lit = layouts_.find(k);
  if (lit == layouts_.end()) {
    KernelPipeline layout;
    TS_RETURN_IF_ERROR(create_layout(k, layout));
    lit = layouts_.emplace(k, layout).first;
  }
  const SpirvBlob* blob = find_blob(spec.spirv);
  if (!blob) return internal_error(fmt::format("vulkan: the shader {} is missing from the binary", spec.spirv));
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = blob->count * sizeof(uint32_t);
  mi.pCode = blob->words;
  VkShaderModule module = VK_NULL_HANDLE;
  VkResult r = vkCreateShaderModule(device_, &mi, nullptr, &module);
  if (r != VK_SUCCESS) return internal_error(vk_error(fmt::format("vkCreateShaderModule({})", spec.spirv).c_str(), r));
  VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
  VkSpecializationInfo si{1, &entry, sizeof(uint32_t), &dtype};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.typed ? &si : nullptr;
  ci.layout = lit->second.layout;
  KernelPipeline p = lit->second;
  r = vkCreateComputePipelines(device_, cache_, 1, &ci, nullptr, &p.pipeline);
  vkDestroyShaderModule(device_, module, nullptr);
  if (r != VK_SUCCESS) {
    return internal_error(vk_error(fmt::format("vkCreateComputePipelines({})", spec.spirv).c_str(), r));
  }
  return &pipelines_.emplace(std::make_pair(k, dtype), p).first->second;
}

void Gpu::wait_idle() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  vkQueueWaitIdle(queue_);
}

Status Gpu::submit(VkCommandBuffer cb, VkFence fence) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  std::lock_guard<std::mutex> lock(queue_mu_);
  VkResult r = vkQueueSubmit(queue_, 1, &si, fence);
  return r == VK_SUCCESS ? ok_status() : internal_error(vk_error("vkQueueSubmit", r));
}

Status Gpu::run_once(const std::function<void(VkCommandBuffer)>& record) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = once_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkResult r = vkAllocateCommandBuffers(device_, &ai, &cb);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkAllocateCommandBuffers", r));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vkBeginCommandBuffer(cb, &bi);
  record(cb);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, VK_ACCESS_TRANSFER_WRITE_BIT,
                     VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
  vkEndCommandBuffer(cb);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  r = vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE);
  if (r == VK_SUCCESS) r = vkQueueWaitIdle(queue_);
  vkFreeCommandBuffers(device_, once_pool_, 1, &cb);
  return r == VK_SUCCESS ? ok_status() : internal_error(vk_error("a one-off submission", r));
}

Result<Window> Gpu::rope_table(float theta, int64_t head_dim) {
  uint32_t bits;
  std::memcpy(&bits, &theta, 4);
  std::lock_guard<std::mutex> lock(rope_mu_);
  auto it = rope_tables_.find({bits, head_dim});
  if (it == rope_tables_.end()) {
    // ops/ref/rope.cc's angle, term for term.
    std::vector<float> f(static_cast<size_t>(head_dim / 2));
    for (int64_t j = 0; j < head_dim / 2; ++j) {
      f[static_cast<size_t>(j)] = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(head_dim));
    }
    TS_ASSIGN_OR_RETURN(std::unique_ptr<GpuBuffer> buf, create_buffer(f.size() * 4, MemoryKind::kDevice, false));
    if (buf->mapped()) {
      std::memcpy(buf->mapped(), f.data(), f.size() * 4);
    } else {
      TS_ASSIGN_OR_RETURN(std::unique_ptr<GpuBuffer> staging, create_buffer(f.size() * 4, MemoryKind::kStaging));
      std::memcpy(staging->mapped(), f.data(), f.size() * 4);
      const VkBufferCopy region{0, 0, f.size() * 4};
      TS_RETURN_IF_ERROR(
          run_once([&](VkCommandBuffer cb) { vkCmdCopyBuffer(cb, staging->handle(), buf->handle(), 1, &region); }));
    }
    it = rope_tables_.emplace(std::make_pair(bits, head_dim), std::move(buf)).first;
  }
  return whole(*it->second);
}

std::string Gpu::describe_short() const {
  const PhysicalInfo& pi = info();
  return fmt::format("{} (Vulkan {}, {}{}; matmul reductions: {}; buffers: {})", pi.props.deviceName, pi.api_version(),
                     pi.type_name(), pi.driver.empty() ? "" : ", " + pi.driver,
                     subgroups_ ? fmt::format("subgroups of {}", pi.subgroup_size) : "shared memory",
                     host_visible_ ? "host-visible, mapped" : "device-local + staging");
}

}  // namespace tessera::ops::vulkan
