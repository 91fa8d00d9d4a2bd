// The opencl backend: Tessera's operators as OpenCL C kernels (kernels.cl), compiled at load by the
// platform's compiler (PoCL on CPUs here; any OpenCL 1.2+ device elsewhere) and cached on disk as device
// binaries, keyed by a hash of the source, the device, the driver and the build options.
//
// One device per OpenCL device found (all platforms). Buffers live in device memory (host_ptr() is null);
// operators are enqueued on an in-order command queue; reads block; synchronize() waits for the queue and
// reports data-dependent errors (an id, slot or block outside its range) that kernels flagged.
// Weights: f32, f16, q8_0, q4_0, q4_k, q6_k (kernels_quant.cl). KV cache: f32, f16. Graphs: Stream::record
// binds one kernel object per op and, with cl_khr_command_buffer, records a command buffer (command_buffer.h).
// DeviceOptions::threads partitions a CPU device to that many compute units where the platform supports
// it; DeviceOptions::cache_dir moves the binary cache (default $XDG_CACHE_HOME/tessera/opencl or
// ~/.cache/tessera/opencl).
#pragma once

#include <memory>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::opencl {

// Unavailable, with the reason, when no OpenCL platform or device is present.
Result<std::unique_ptr<Backend>> create_backend();

}  // namespace tessera::ops::opencl
