// Recording compute work into a Vulkan command buffer: descriptor sets (cached by what they bind) and
// dispatches with the barriers that keep operators in submission order.
//
// DescriptorCache hands out a descriptor set for a kernel's layout and a list of windows, allocating and
// writing it the first time and returning the same set afterwards: a decode step binds the same buffers
// every time, so after the first step no descriptor is written again. Keys name buffers by their uid,
// never by VkBuffer handle (a freed handle's value may come back for a new buffer).
//
// CommandWriter appends to one command buffer. Every dispatch and copy is preceded by a global memory
// barrier (compute and transfer writes before, compute and transfer reads and writes after), which orders
// them after everything earlier on the queue, this buffer's commands and earlier submissions alike.
//
// Internal to src/ops/vulkan. Thread-safety: owned by one stream or recording (one thread at a time).
#pragma once

#include <vulkan/vulkan.h>

#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "ops/vulkan/gpu.h"

namespace tessera::ops::vulkan {

class DescriptorCache {
 public:
  explicit DescriptorCache(VkDevice device) : device_(device) {}
  ~DescriptorCache();
  DescriptorCache(const DescriptorCache&) = delete;
  DescriptorCache& operator=(const DescriptorCache&) = delete;

  Result<VkDescriptorSet> get(const KernelPipeline& kp, std::span<const Window> bindings);
  size_t size() const { return sets_.size(); }
  // Frees every set; only when no submitted command buffer still uses one.
  void reset();

 private:
  Status grow();
  VkDevice device_;
  std::vector<VkDescriptorPool> pools_;
  std::unordered_map<std::string, VkDescriptorSet> sets_;
};

class CommandWriter {
 public:
  CommandWriter(Gpu& gpu, VkCommandBuffer cb, DescriptorCache& sets) : gpu_(gpu), cb_(cb), sets_(sets) {}

  Gpu& gpu() { return gpu_; }
  // Dispatches `groups` workgroups of kernel `k`; counts above the device's per-dimension limit are laid
  // out in two dimensions (the shaders' linear_group()). Nothing when groups == 0.
  Status dispatch(Kernel k, uint32_t dtype, std::initializer_list<Window> bindings, const void* push,
                  uint32_t push_bytes, uint64_t groups);
  // A two-dimensional grid as given (matmul's tiles).
  Status dispatch_2d(Kernel k, uint32_t dtype, std::initializer_list<Window> bindings, const void* push,
                     uint32_t push_bytes, uint32_t gx, uint32_t gy);
  void copy(VkBuffer src, VkBuffer dst, std::span<const VkBufferCopy> regions);
  // Makes the buffer's results visible to the host once its fence signals.
  void finish_for_host();
  static void barrier(VkCommandBuffer cb);

 private:
  Gpu& gpu_;
  VkCommandBuffer cb_;
  DescriptorCache& sets_;
};

}  // namespace tessera::ops::vulkan
