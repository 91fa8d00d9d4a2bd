// One opened Vulkan device: the logical device and its compute queue, buffers and the memory they live in,
// the compute pipelines (created on first use, one per shader and weight type), and small device-owned
// tables (rope frequencies).
//
// Memory. Where the device says its device-local memory is also host-visible and coherent (lavapipe, and
// integrated GPUs that share the host's memory) every buffer lives there, mapped for its lifetime: uploads
// and downloads are memcpy once the queue is idle, and Buffer::host_ptr() is that mapping. Elsewhere
// buffers are device-local and copies go through host-visible staging buffers with vkCmdCopyBuffer.
// TESSERA_VULKAN_STAGING=1 forces the staging path on any device (tests run both paths on lavapipe).
// TESSERA_VULKAN_SUBGROUPS=off builds matmul's reductions without subgroup operations.
//
// Internal to src/ops/vulkan. Thread-safety: a Gpu is shared by its Device, Streams and Buffers (shared_ptr)
// and may be used from several threads: pipeline creation, queue submission and one-off commands lock.
#pragma once

#include <vulkan/vulkan.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/vulkan/instance.h"
#include "ops/vulkan/kernels.h"

namespace tessera::ops::vulkan {

class Gpu;

enum class MemoryKind {
  kDevice,   // a tensor's buffer (host-visible and mapped only where Gpu::host_visible())
  kStaging,  // host-visible, coherent, mapped: staging copies and the kernels' error word
};

class GpuBuffer final : public Buffer {
 public:
  // `keep` holds the Gpu alive while the buffer lives (null for the Gpu's own buffers).
  GpuBuffer(VkDevice device, std::shared_ptr<Gpu> keep, size_t size, VkBuffer buffer, VkDeviceMemory memory,
            VkDeviceSize alloc_size, void* mapped, bool expose);
  ~GpuBuffer() override;
  void* host_ptr() override { return expose_ ? mapped_ : nullptr; }

  VkBuffer handle() const { return buffer_; }
  VkDeviceSize alloc_size() const { return alloc_size_; }             // the VkBuffer's size: size() rounded up to 16
  uint8_t* mapped() const { return static_cast<uint8_t*>(mapped_); }  // null unless host-visible
  uint64_t uid() const { return uid_; }  // unique for the process's life (descriptor-set cache keys)

 private:
  VkDevice device_;
  std::shared_ptr<Gpu> keep_;
  VkBuffer buffer_;
  VkDeviceMemory memory_;
  VkDeviceSize alloc_size_;
  void* mapped_;
  bool expose_;
  uint64_t uid_;
};

// The part of a buffer a shader binds: [offset, offset + range) of the VkBuffer, and where the tensor starts
// inside it (bytes). Whole buffers are bound where the device allows (more descriptor-set cache hits).
struct Window {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t uid = 0;
  VkDeviceSize offset = 0, range = 0;
  uint32_t rel = 0;
};

struct KernelPipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t bindings = 0, push_bytes = 0;
};

struct GpuOptions {
  bool force_staging = false;  // TESSERA_VULKAN_STAGING=1
  bool subgroups = true;       // TESSERA_VULKAN_SUBGROUPS != off
};

class Gpu : public std::enable_shared_from_this<Gpu> {
 public:
  static Result<std::shared_ptr<Gpu>> create(std::shared_ptr<Instance> instance, int index, GpuOptions options);
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  VkDevice device() const { return device_; }
  const PhysicalInfo& info() const { return instance_->devices()[static_cast<size_t>(index_)]; }
  const VkPhysicalDeviceLimits& limits() const { return info().props.limits; }
  uint32_t queue_family() const { return family_; }
  bool host_visible() const { return host_visible_; }
  bool subgroups() const { return subgroups_; }
  // The largest window a shader may bind, and the alignment of a window's start.
  VkDeviceSize max_range() const { return limits().maxStorageBufferRange; }
  VkDeviceSize range_align() const;

  // ResourceExhausted when the memory is not there; the contents are zero.
  Result<std::unique_ptr<GpuBuffer>> create_buffer(size_t bytes, MemoryKind kind) {
    return create_buffer(bytes, kind, true);
  }
  // The window a shader binds to reach `t` (which must lie inside its buffer). InvalidArgument when the
  // tensor needs more than max_range().
  Result<Window> window(const Tensor& t) const;
  static Window whole(const GpuBuffer& b);

  // The pipeline of kernel `k` (specialised on `dtype` when the kernel is typed), created on first use.
  Result<const KernelPipeline*> pipeline(Kernel k, uint32_t dtype);

  // Submits on the compute queue (serialised across threads).
  Status submit(VkCommandBuffer cb, VkFence fence);
  // Waits until the queue has run everything submitted (from any stream).
  void wait_idle();
  // Records commands into a one-off command buffer, submits it and waits.
  Status run_once(const std::function<void(VkCommandBuffer)>& record);

  // f32 [head_dim / 2] = theta^(-2j / head_dim), computed on the host as ops/ref does, kept for the device's
  // life: RopeOp without a freqs table reads this one.
  Result<Window> rope_table(float theta, int64_t head_dim);

  // "llvmpipe (...) (Vulkan 1.3.230, cpu, ...)"
  std::string describe_short() const;

 private:
  Gpu(std::shared_ptr<Instance> instance, int index) : instance_(std::move(instance)), index_(index) {}
  Status init(GpuOptions options);
  int memory_type(uint32_t allowed, VkMemoryPropertyFlags want) const;
  Status create_layout(Kernel k, KernelPipeline& p);
  Result<std::unique_ptr<GpuBuffer>> create_buffer(size_t bytes, MemoryKind kind, bool keep_alive);

  std::shared_ptr<Instance> instance_;
  int index_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  bool host_visible_ = false;
  bool subgroups_ = false;
  int device_type_ = -1;   // memory type of kDevice buffers
  int staging_type_ = -1;  // memory type of kStaging buffers
  VkPipelineCache cache_ = VK_NULL_HANDLE;

  std::mutex queue_mu_;  // guards queue_ and once_pool_
  VkCommandPool once_pool_ = VK_NULL_HANDLE;

  std::mutex pipeline_mu_;  // guards layouts_ and pipelines_
  std::map<Kernel, KernelPipeline> layouts_;
  std::map<std::pair<Kernel, uint32_t>, KernelPipeline> pipelines_;

  std::mutex rope_mu_;  // guards rope_tables_
  std::map<std::pair<uint32_t, int64_t>, std::unique_ptr<GpuBuffer>> rope_tables_;
};

}  // namespace tessera::ops::vulkan
