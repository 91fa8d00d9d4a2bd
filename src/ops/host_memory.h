// Host memory for backends whose devices share the host's address space (ref, cpu): zeroed, 64-byte
// aligned buffers and the bounds check of their copies. One implementation so the backends cannot drift.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

// ResourceExhausted naming `backend` when the memory is not there.
Result<std::unique_ptr<Buffer>> alloc_host_buffer(size_t bytes, std::string_view backend);
// OutOfRange when [offset, offset + bytes) is not inside `b`.
Status check_host_range(const Buffer& b, size_t offset, size_t bytes, const char* what);

}  // namespace tessera::ops
