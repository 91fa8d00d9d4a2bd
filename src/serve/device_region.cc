#include "serve/device_region.h"

#include <fmt/format.h>

namespace tessera::serve {

Result<std::shared_ptr<BufferDeviceMemory>> BufferDeviceMemory::create(ops::Device& device, ops::Buffer& buffer,
                                                                       uint64_t offset, uint64_t length) {
  if (offset > buffer.size() || length > buffer.size() - offset) {
    return invalid_argument(
        fmt::format("device region [{}, {}) is not inside a {}-byte buffer", offset, offset + length, buffer.size()));
  }
  return std::shared_ptr<BufferDeviceMemory>(new BufferDeviceMemory(device, buffer, offset, length));
}

Status BufferDeviceMemory::copy(uint64_t offset, std::byte* host, uint64_t length, ops::CopyDirection dir) {
  if (offset > length_ || length > length_ - offset) {
    return out_of_range(fmt::format("[{}, {}) is outside a {}-byte device region", offset, offset + length, length_));
  }
  if (length == 0) return ok_status();
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::HostStaging> staging,
                      device_.register_staging({host, static_cast<size_t>(length)}));
  const ops::CopyRun run{static_cast<size_t>(offset_ + offset), 0, static_cast<size_t>(length)};
  std::lock_guard<std::mutex> lock(mu_);
  return stream_->copy_runs(buffer_, *staging, std::span(&run, 1), dir);
}

Status BufferDeviceMemory::copy_to_host(uint64_t offset, void* dst, uint64_t length) {
  return copy(offset, static_cast<std::byte*>(dst), length, ops::CopyDirection::kToHost);
}

Status BufferDeviceMemory::copy_from_host(uint64_t offset, const void* src, uint64_t length) {
  // copy_runs only reads the host side when copying to the device.
  return copy(offset, static_cast<std::byte*>(const_cast<void*>(src)), length, ops::CopyDirection::kToDevice);
}

}  // namespace tessera::serve
