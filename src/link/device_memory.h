// The hook through which device memory (GPU, accelerator) becomes a link region. A backend implements it for
// its buffers; the agent registers it with Agent::register_device_region(). Endpoints without a native
// device path stage through host memory with these two calls, so every endpoint can move device bytes.
//
// Thread-safety: implementations must allow concurrent calls on disjoint ranges.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace tessera::link {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual uint64_t length() const = 0;
  virtual Status copy_to_host(uint64_t offset, void* dst, uint64_t length) = 0;
  virtual Status copy_from_host(uint64_t offset, const void* src, uint64_t length) = 0;
};

}  // namespace tessera::link
