#include "ops/vulkan/commands.h"

#include <fmt/core.h>

namespace tessera::ops::vulkan {
namespace {

constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kMaxBindings = 8;

}  // namespace

DescriptorCache::~DescriptorCache() {
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(device_, p, nullptr);
}

Status DescriptorCache::grow() {
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
  VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  ci.maxSets = kSetsPerPool;
  ci.poolSizeCount = 1;
  ci.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  VkResult r = vkCreateDescriptorPool(device_, &ci, nullptr, &pool);
  if (r != VK_SUCCESS) return resource_exhausted(vk_error("vkCreateDescriptorPool", r));
  pools_.push_back(pool);
  return ok_status();
}

void DescriptorCache::reset() {
  for (VkDescriptorPool p : pools_) vkResetDescriptorPool(device_, p, 0);
  // Keep one pool; the others go.
  for (size_t i = 1; i < pools_.size(); ++i) vkDestroyDescriptorPool(device_, pools_[i], nullptr);
  if (pools_.size() > 1) pools_.resize(1);
  sets_.clear();
}

Result<VkDescriptorSet> DescriptorCache::get(const KernelPipeline& kp, std::span<const Window> bindings) {
  std::string key(reinterpret_cast<const char*>(&kp.set_layout), sizeof kp.set_layout);
  for (const Window& w : bindings) {
    key.append(reinterpret_cast<const char*>(&w.uid), sizeof w.uid);
    key.append(reinterpret_cast<const char*>(&w.offset), sizeof w.offset);
    key.append(reinterpret_cast<const char*>(&w.range), sizeof w.range);
  }
  if (auto it = sets_.find(key); it != sets_.end()) return it->second;
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &kp.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  VkResult r = VK_ERROR_OUT_OF_POOL_MEMORY;
  if (!pools_.empty()) {
    ai.descriptorPool = pools_.back();
    r = vkAllocateDescriptorSets(device_, &ai, &set);
  }
  if (r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL) {
    TS_RETURN_IF_ERROR(grow());
    ai.descriptorPool = pools_.back();
    r = vkAllocateDescriptorSets(device_, &ai, &set);
  }
  if (r != VK_SUCCESS) return resource_exhausted(vk_error("vkAllocateDescriptorSets", r));
  std::vector<VkDescriptorBufferInfo> infos(bindings.size());
  std::vector<VkWriteDescriptorSet> writes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    infos[i] = {bindings[i].buffer, bindings[i].offset, bindings[i].range};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  sets_.emplace(std::move(key), set);
  return set;
}

void CommandWriter::barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr,
                     VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                     VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT};
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

Status CommandWriter::dispatch_2d(Kernel k, uint32_t dtype, std::initializer_list<Window> bindings, const void* push,
                                  uint32_t push_bytes, uint32_t gx, uint32_t gy) {
  if (gx == 0 || gy == 0) return ok_status();
  const VkPhysicalDeviceLimits& l = gpu_.limits();
  if (gx > l.maxComputeWorkGroupCount[0] || gy > l.maxComputeWorkGroupCount[1]) {
    return invalid_argument(fmt::format("vulkan: a grid of {} x {} workgroups exceeds the device's {} x {}", gx, gy,
                                        l.maxComputeWorkGroupCount[0], l.maxComputeWorkGroupCount[1]));
  }
  TS_ASSIGN_OR_RETURN(const KernelPipeline* kp, gpu_.pipeline(k, dtype));
  if (bindings.size() != kp->bindings || push_bytes != kp->push_bytes) {
    return internal_error(fmt::format("vulkan: kernel {} takes {} bindings and {} push bytes, given {} and {}",
                                      kernel_spec(k).spirv, kp->bindings, kp->push_bytes, bindings.size(), push_bytes));
  }
  TS_ASSIGN_OR_RETURN(VkDescriptorSet set, sets_.get(*kp, std::span(bindings.begin(), bindings.size())));
  barrier(cb_);
  vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, kp->pipeline);
  vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, kp->layout, 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cb_, kp->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cb_, gx, gy, 1);
  return ok_status();
}

Status CommandWriter::dispatch(Kernel k, uint32_t dtype, std::initializer_list<Window> bindings, const void* push,
                               uint32_t push_bytes, uint64_t groups) {
  if (groups == 0) return ok_status();
  const uint64_t max_x = gpu_.limits().maxComputeWorkGroupCount[0];
  const uint64_t gx = std::min(groups, max_x);
  const uint64_t gy = (groups + gx - 1) / gx;
  if (gy > gpu_.limits().maxComputeWorkGroupCount[1]) {
    return invalid_argument(fmt::format("vulkan: {} workgroups are more than the device can dispatch", groups));
  }
  return dispatch_2d(k, dtype, bindings, push, push_bytes, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy));
}

void CommandWriter::copy(VkBuffer src, VkBuffer dst, std::span<const VkBufferCopy> regions) {
  if (regions.empty()) return;
  barrier(cb_);
  vkCmdCopyBuffer(cb_, src, dst, static_cast<uint32_t>(regions.size()), regions.data());
}

void CommandWriter::finish_for_host() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr,
                     VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
  vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

}  // namespace tessera::ops::vulkan
