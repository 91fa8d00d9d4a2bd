#include "ops/vulkan/stream.h"

#include <cstring>

#include <fmt/core.h>

#include "ops/copy_runs.h"
#include "ops/vulkan/encode.h"

namespace tessera::ops::vulkan {
namespace {

// Copies through staging go in pieces of at most this many bytes (the staging buffer's largest size).
constexpr size_t kStagingChunk = size_t{32} << 20;
// Cached descriptor sets above which an idle stream starts its cache afresh (buffers come and go in tests).
constexpr size_t kMaxCachedSets = 4096;

Status check_range(const Buffer& b, size_t offset, size_t bytes, const char* what) {
  if (offset > b.size() || bytes > b.size() - offset) {
    return out_of_range(
        fmt::format("{} of {} bytes at offset {} runs past a {}-byte buffer", what, bytes, offset, b.size()));
  }
  return ok_status();
}

class VkRecording final : public Recording {
 public:
  VkRecording(VkStream& stream, VkCommandPool pool) : stream_(stream), pool_(pool), sets_(stream.gpu().device()) {}
  ~VkRecording() override {
    (void)stream_.wait_for(cb_);  // a replay may still be running
    VkDevice d = stream_.gpu().device();
    if (cb_) vkFreeCommandBuffers(d, pool_, 1, &cb_);
    vkDestroyCommandPool(d, pool_, nullptr);
  }
  Status replay() override { return stream_.submit_recorded(cb_); }
  std::string_view kind() const override { return "vulkan command buffer"; }

  VkStream& stream_;
  VkCommandPool pool_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  DescriptorCache sets_;
  std::unique_ptr<GpuBuffer> scratch_;
};

}  // namespace

Result<std::unique_ptr<VkStream>> VkStream::create(std::shared_ptr<Gpu> gpu) {
  std::unique_ptr<VkStream> s(new VkStream(std::move(gpu)));
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  ci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  ci.queueFamilyIndex = s->gpu_->queue_family();
  VkResult r = vkCreateCommandPool(s->gpu_->device(), &ci, nullptr, &s->pool_);
  if (r != VK_SUCCESS) {
    s->pool_ = VK_NULL_HANDLE;
    return internal_error(vk_error("vkCreateCommandPool", r));
  }
  TS_ASSIGN_OR_RETURN(s->error_buf_, s->gpu_->create_buffer(16, MemoryKind::kStaging));
  s->error_ = Gpu::whole(*s->error_buf_);
  return s;
}

VkStream::~VkStream() {
  (void)idle();
  VkDevice d = gpu_->device();
  for (VkFence f : free_fences_) vkDestroyFence(d, f, nullptr);
  if (pool_) vkDestroyCommandPool(d, pool_, nullptr);
}

Result<VkCommandBuffer> VkStream::open() {
  if (open_) return open_;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  if (!free_cbs_.empty()) {
    cb = free_cbs_.back();
    free_cbs_.pop_back();
  } else {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkResult r = vkAllocateCommandBuffers(gpu_->device(), &ai, &cb);
    if (r != VK_SUCCESS) return internal_error(vk_error("vkAllocateCommandBuffers", r));
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VkResult r = vkBeginCommandBuffer(cb, &bi);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkBeginCommandBuffer", r));
  open_ = cb;
  return cb;
}

Status VkStream::submit_tracked(VkCommandBuffer cb, bool owned) {
  VkFence fence = VK_NULL_HANDLE;
  if (!free_fences_.empty()) {
    fence = free_fences_.back();
    free_fences_.pop_back();
  } else {
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkResult r = vkCreateFence(gpu_->device(), &fi, nullptr, &fence);
    if (r != VK_SUCCESS) return internal_error(vk_error("vkCreateFence", r));
  }
  Status s = gpu_->submit(cb, fence);
  if (!s.ok()) {
    free_fences_.push_back(fence);
    if (owned) free_cbs_.push_back(cb);
    return s;
  }
  in_flight_.push_back({cb, fence, owned});
  return ok_status();
}

Status VkStream::flush() {
  if (!open_) return ok_status();
  VkCommandBuffer cb = open_;
  open_ = VK_NULL_HANDLE;
  CommandWriter(*gpu_, cb, sets_).finish_for_host();
  VkResult r = vkEndCommandBuffer(cb);
  if (r != VK_SUCCESS) {
    vkResetCommandBuffer(cb, 0);
    free_cbs_.push_back(cb);
    return internal_error(vk_error("vkEndCommandBuffer", r));
  }
  return submit_tracked(cb, true);
}

Status VkStream::wait_all() {
  Status status = ok_status();
  VkDevice d = gpu_->device();
  for (const InFlight& f : in_flight_) {
    VkResult r = vkWaitForFences(d, 1, &f.fence, VK_TRUE, UINT64_MAX);
    if (r != VK_SUCCESS && status.ok()) status = internal_error(vk_error("vkWaitForFences", r));
    vkResetFences(d, 1, &f.fence);
    free_fences_.push_back(f.fence);
    if (f.owned) {
      vkResetCommandBuffer(f.cb, 0);
      free_cbs_.push_back(f.cb);
    }
  }
  in_flight_.clear();
  retired_.clear();
  if (!open_ && sets_.size() > kMaxCachedSets) sets_.reset();
  return status;
}

Status VkStream::wait_for(VkCommandBuffer cb) {
  for (const InFlight& f : in_flight_) {
    if (f.cb == cb) return wait_all();
  }
  return ok_status();
}

Status VkStream::submit_recorded(VkCommandBuffer cb) {
  TS_RETURN_IF_ERROR(flush());
  TS_RETURN_IF_ERROR(wait_for(cb));  // no simultaneous use: the last replay must be done
  return submit_tracked(cb, false);
}

Status VkStream::take_kernel_error() {
  uint32_t flag = 0;
  std::memcpy(&flag, error_buf_->mapped(), sizeof flag);
  if (flag == 0) return ok_status();
  std::memset(error_buf_->mapped(), 0, sizeof flag);
  return out_of_range("vulkan: a token id, KV slot, position, block number or expert id was outside its range");
}

Result<Window> VkStream::scratch(size_t bytes) {
  if (!scratch_ || scratch_->size() < bytes) {
    if (scratch_) retired_.push_back(std::move(scratch_));  // the open command buffer may still use it
    TS_ASSIGN_OR_RETURN(scratch_, gpu_->create_buffer(std::max<size_t>(bytes, 4096), MemoryKind::kDevice));
  }
  return Gpu::whole(*scratch_);
}

Result<GpuBuffer*> VkStream::staging(size_t bytes) {
  if (!staging_ || staging_->size() < bytes) {
    staging_.reset();
    TS_ASSIGN_OR_RETURN(staging_, gpu_->create_buffer(std::max<size_t>(bytes, 1 << 16), MemoryKind::kStaging));
  }
  return staging_.get();
}

Status VkStream::run(const Op& op) {
  Support s = capability(*gpu_, op);
  if (!s.supported) {
    TS_RETURN_IF_ERROR(validate(op));
    return unimplemented(s.reason);
  }
  TS_ASSIGN_OR_RETURN(VkCommandBuffer cb, open());
  CommandWriter writer(*gpu_, cb, sets_);
  EncodeTarget target{writer, error_, [this](size_t bytes) { return scratch(bytes); }};
  return encode(op, target);
}

Result<std::unique_ptr<Recording>> VkStream::record(std::span<const Op> ops) {
  size_t bytes = 0;
  for (const Op& op : ops) {
    if (Support s = capability(*gpu_, op); !s.supported) {
      TS_RETURN_IF_ERROR(validate(op));
      return unimplemented(s.reason);
    }
    bytes = std::max(bytes, scratch_bytes(*gpu_, op));
  }
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  ci.queueFamilyIndex = gpu_->queue_family();
  VkCommandPool pool = VK_NULL_HANDLE;
  VkResult r = vkCreateCommandPool(gpu_->device(), &ci, nullptr, &pool);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkCreateCommandPool", r));
  auto rec = std::make_unique<VkRecording>(*this, pool);
  if (bytes > 0) {
    TS_ASSIGN_OR_RETURN(rec->scratch_, gpu_->create_buffer(bytes, MemoryKind::kDevice));
  }
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  r = vkAllocateCommandBuffers(gpu_->device(), &ai, &rec->cb_);
  if (r != VK_SUCCESS) {
    rec->cb_ = VK_NULL_HANDLE;
    return internal_error(vk_error("vkAllocateCommandBuffers", r));
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  vkBeginCommandBuffer(rec->cb_, &bi);
  CommandWriter writer(*gpu_, rec->cb_, rec->sets_);
  GpuBuffer* scratch = rec->scratch_.get();
  EncodeTarget target{writer, error_, [scratch](size_t need) -> Result<Window> {
                        if (!scratch || scratch->size() < need)
                          return internal_error("vulkan: a recorded attention outgrew its scratch");
                        return Gpu::whole(*scratch);
                      }};
  for (const Op& op : ops) TS_RETURN_IF_ERROR(encode(op, target));
  writer.finish_for_host();
  r = vkEndCommandBuffer(rec->cb_);
  if (r != VK_SUCCESS) return internal_error(vk_error("vkEndCommandBuffer", r));
  return std::unique_ptr<Recording>(std::move(rec));
}

Status VkStream::write(Buffer& dst, size_t offset, const void* src, size_t bytes) {
  TS_RETURN_IF_ERROR(check_range(dst, offset, bytes, "write"));
  if (bytes == 0) return ok_status();
  TS_RETURN_IF_ERROR(idle());
  auto& b = static_cast<GpuBuffer&>(dst);
  if (b.mapped()) {
    std::memcpy(b.mapped() + offset, src, bytes);
    return ok_status();
  }
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingChunk, bytes - done);
    TS_ASSIGN_OR_RETURN(GpuBuffer * st, staging(n));
    std::memcpy(st->mapped(), static_cast<const uint8_t*>(src) + done, n);
    TS_ASSIGN_OR_RETURN(VkCommandBuffer cb, open());
    const VkBufferCopy region{0, offset + done, n};
    CommandWriter(*gpu_, cb, sets_).copy(st->handle(), b.handle(), std::span(&region, 1));
    TS_RETURN_IF_ERROR(idle());
    done += n;
  }
  return ok_status();
}

Status VkStream::read(Buffer& src, size_t offset, void* dst, size_t bytes) {
  TS_RETURN_IF_ERROR(check_range(src, offset, bytes, "read"));
  TS_RETURN_IF_ERROR(idle());
  auto& b = static_cast<GpuBuffer&>(src);
  if (bytes > 0 && b.mapped()) std::memcpy(dst, b.mapped() + offset, bytes);
  for (size_t done = 0; bytes > 0 && !b.mapped() && done < bytes;) {
    const size_t n = std::min(kStagingChunk, bytes - done);
    TS_ASSIGN_OR_RETURN(GpuBuffer * st, staging(n));
    TS_ASSIGN_OR_RETURN(VkCommandBuffer cb, open());
    const VkBufferCopy region{offset + done, 0, n};
    CommandWriter(*gpu_, cb, sets_).copy(b.handle(), st->handle(), std::span(&region, 1));
    TS_RETURN_IF_ERROR(idle());
    std::memcpy(static_cast<uint8_t*>(dst) + done, st->mapped(), n);
    done += n;
  }
  return take_kernel_error();
}

Status VkStream::synchronize() {
  TS_RETURN_IF_ERROR(idle());
  return take_kernel_error();
}

// Host-visible buffers: one memcpy per run. Otherwise runs are packed into the staging buffer, as many as fit,
// and moved by one vkCmdCopyBuffer with one region per run.
Status VkStream::copy_runs(Buffer& buffer, HostStaging& staging_region, std::span<const CopyRun> runs,
                           CopyDirection dir) {
  TS_RETURN_IF_ERROR(check_runs(buffer, staging_region, runs));
  TS_RETURN_IF_ERROR(idle());
  auto& b = static_cast<GpuBuffer&>(buffer);
  std::byte* host = staging_region.bytes().data();
  const bool to_host = dir == CopyDirection::kToHost;
  if (b.mapped()) {
    for (const CopyRun& r : runs) {
      if (r.bytes == 0) continue;
      if (to_host) {
        std::memcpy(host + r.host_offset, b.mapped() + r.device_offset, r.bytes);
      } else {
        std::memcpy(b.mapped() + r.device_offset, host + r.host_offset, r.bytes);
      }
    }
    return to_host ? take_kernel_error() : ok_status();
  }
  size_t i = 0;
  while (i < runs.size()) {
    // A batch of runs whose bytes fit one staging buffer (a run larger than that goes alone, in pieces).
    std::vector<VkBufferCopy> regions;
    std::vector<std::pair<size_t, const CopyRun*>> placed;  // staging offset, run
    size_t used = 0;
    for (; i < runs.size(); ++i) {
      const CopyRun& r = runs[i];
      if (r.bytes == 0) continue;
      if (r.bytes > kStagingChunk) {
        if (!regions.empty()) break;
        // Alone: through write()/read(), which split it.
        Status s = to_host ? read(b, r.device_offset, host + r.host_offset, r.bytes)
                           : write(b, r.device_offset, host + r.host_offset, r.bytes);
        TS_RETURN_IF_ERROR(s);
        continue;
      }
      if (used + r.bytes > kStagingChunk) break;
      placed.emplace_back(used, &r);
      regions.push_back(to_host ? VkBufferCopy{r.device_offset, used, r.bytes}
                                : VkBufferCopy{used, r.device_offset, r.bytes});
      used += r.bytes;
    }
    if (regions.empty()) continue;
    TS_ASSIGN_OR_RETURN(GpuBuffer * st, staging(used));
    if (!to_host) {
      for (auto [at, r] : placed) std::memcpy(st->mapped() + at, host + r->host_offset, r->bytes);
    }
    TS_ASSIGN_OR_RETURN(VkCommandBuffer cb, open());
    CommandWriter w(*gpu_, cb, sets_);
    if (to_host) {
      w.copy(b.handle(), st->handle(), regions);
    } else {
      w.copy(st->handle(), b.handle(), regions);
    }
    TS_RETURN_IF_ERROR(idle());
    if (to_host) {
      for (auto [at, r] : placed) std::memcpy(host + r->host_offset, st->mapped() + at, r->bytes);
    }
  }
  return to_host ? take_kernel_error() : ok_status();
}

}  // namespace tessera::ops::vulkan
