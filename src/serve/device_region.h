// BufferDeviceMemory: link::DeviceMemory over a range of a device buffer of any backend, so the link can register
// device memory (a KV cache, a device-side staging buffer) as a region and move it without the caller copying
// it out first. Every piece the link stages goes through Stream::copy_runs as one run: on opencl one
// clEnqueueRead/WriteBuffer, on cuda one cudaMemcpyAsync into host memory pinned for the copy by
// Device::register_staging (ref, cpu: one memcpy). So device bytes reach the wire with one copy on each side.
//
// Thread-safety: calls may come from any thread (the link's connection threads); they share one stream and are
// serialised on it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "link/device_memory.h"
#include "ops/backend.h"

namespace tessera::serve {

class BufferDeviceMemory final : public link::DeviceMemory {
 public:
  // [offset, offset + length) of `buffer`, which must outlive this object (and so every region over it).
  // InvalidArgument when the range is not inside the buffer.
  static Result<std::shared_ptr<BufferDeviceMemory>> create(ops::Device& device, ops::Buffer& buffer, uint64_t offset,
                                                            uint64_t length);

  uint64_t length() const override { return length_; }
  Status copy_to_host(uint64_t offset, void* dst, uint64_t length) override;
  Status copy_from_host(uint64_t offset, const void* src, uint64_t length) override;

 private:
  BufferDeviceMemory(ops::Device& device, ops::Buffer& buffer, uint64_t offset, uint64_t length)
      : device_(device), buffer_(buffer), offset_(offset), length_(length), stream_(device.create_stream()) {}
  Status copy(uint64_t offset, std::byte* host, uint64_t length, ops::CopyDirection dir);

  ops::Device& device_;
  ops::Buffer& buffer_;
  const uint64_t offset_, length_;
  std::mutex mu_;
  std::unique_ptr<ops::Stream> stream_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::serve
