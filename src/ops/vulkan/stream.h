// The vulkan backend's Stream and Recording.
//
// A stream records operators into one open command buffer (a step's operators, descriptor sets from the
// stream's cache) and submits it when the host needs a result or must touch memory: synchronize(), read(),
// write(), copy_runs() and record() submit what is open and wait for everything in flight, so the host never
// writes memory a queued kernel still reads. Data-dependent errors (a token id, slot or block number out of
// range) are flagged by the kernels in a host-visible word and returned, as OutOfRange, by the next
// synchronize() or read(), like the opencl backend.
//
// record() writes the operators into a command buffer of the recording's own, once: its own descriptor sets
// and attention scratch, the stream's error word. replay() submits that buffer on the stream's queue after
// whatever the stream has open: nothing is validated, encoded or bound again.
//
// Internal to src/ops/vulkan. Thread-safety: a stream and its recordings belong to one thread at a time; the
// stream must outlive its recordings (ops/backend.h).
#pragma once

#include <memory>
#include <vector>

#include "ops/backend.h"
#include "ops/vulkan/commands.h"
#include "ops/vulkan/gpu.h"

namespace tessera::ops::vulkan {

class VkStream final : public Stream {
 public:
  static Result<std::unique_ptr<VkStream>> create(std::shared_ptr<Gpu> gpu);
  ~VkStream() override;

  Status run(const Op& op) override;
  Result<std::unique_ptr<Recording>> record(std::span<const Op> ops) override;
  Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) override;
  Status read(Buffer& src, size_t offset, void* dst, size_t bytes) override;
  Status synchronize() override;
  Status copy_runs(Buffer& buffer, HostStaging& staging, std::span<const CopyRun> runs, CopyDirection dir) override;

  // For recordings: submits `cb` after the stream's open work (waiting first if `cb` is still in flight),
  // and waits until `cb` is no longer in flight.
  Status submit_recorded(VkCommandBuffer cb);
  Status wait_for(VkCommandBuffer cb);
  Gpu& gpu() { return *gpu_; }
  const Window& error_word() const { return error_; }

 private:
  explicit VkStream(std::shared_ptr<Gpu> gpu) : gpu_(std::move(gpu)), sets_(gpu_->device()) {}
  Result<VkCommandBuffer> open();  // the open command buffer, begun on first use
  Status flush();                  // submits the open command buffer, if any
  Status wait_all();               // waits for every submission; recycles their buffers and fences
  Status idle() {
    TS_RETURN_IF_ERROR(flush());
    return wait_all();
  }
  Status take_kernel_error();
  Result<Window> scratch(size_t bytes);
  Result<GpuBuffer*> staging(size_t bytes);
  Status submit_tracked(VkCommandBuffer cb, bool owned);

  struct InFlight {
    VkCommandBuffer cb;
    VkFence fence;
    bool owned;  // from this stream's pool (recycled), not a recording's
  };

  std::shared_ptr<Gpu> gpu_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer open_ = VK_NULL_HANDLE;
  std::vector<InFlight> in_flight_;
  std::vector<VkCommandBuffer> free_cbs_;
  std::vector<VkFence> free_fences_;
  DescriptorCache sets_;
  std::unique_ptr<GpuBuffer> error_buf_;
  Window error_;
  std::unique_ptr<GpuBuffer> scratch_, staging_;
  std::vector<std::unique_ptr<GpuBuffer>> retired_;  // replaced scratch, freed once the queue is idle
};

}  // namespace tessera::ops::vulkan
