// The cuda backend: Tessera's operators as CUDA kernels (kernels.cu), built for sm_90 plus portable PTX
// when CMake finds nvcc (TESSERA_CUDA=auto|ON|OFF). One device per CUDA device; buffers in device memory
// (host_ptr() is null); operators run on one cudaStream_t per Stream; data-dependent index errors flagged
// by kernels are reported at synchronize() or the next read. Weights (matmul, experts, embedding tables): every
// stored type but i32, widened in the kernels. KV cache: f32, f16. Every operator of ops.h.
// Graphs: Stream::record captures the operators into a CUDA graph (stream capture) replayed by one launch.
#pragma once

#include <memory>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::cuda {

// Unavailable, with the reason, when the driver or a device is missing.
Result<std::unique_ptr<Backend>> create_backend();

}  // namespace tessera::ops::cuda
