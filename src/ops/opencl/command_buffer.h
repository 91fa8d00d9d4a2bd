// Recording for the opencl backend: a decode step's kernels bound once, with their arguments, and replayed
// without setting an argument again.
//
// Each recorded operator gets its own cl_kernel object (clCreateKernel), so its arguments stay set for the
// life of the recording. Where the device offers cl_khr_command_buffer (PoCL 3.1 reports revision 0.9.0)
// and needs no special queue properties, the kernels are also recorded into a finalised command buffer and
// a replay is one clEnqueueCommandBufferKHR; otherwise a replay enqueues the bound kernels one by one.
// TESSERA_OPENCL_COMMAND_BUFFER=off forces the kernel list (tests check both ways give the same result).
//
// Internal to src/ops/opencl: only opencl_backend.cc includes it. Thread-safety: a ClRecording belongs to
// the stream (and thread) that made it.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::opencl {

// The extension's entry points, looked up on the device's platform; all null when it is absent.
struct CommandBufferApi {
  clCreateCommandBufferKHR_fn create = nullptr;
  clFinalizeCommandBufferKHR_fn finalize = nullptr;
  clReleaseCommandBufferKHR_fn release = nullptr;
  clEnqueueCommandBufferKHR_fn enqueue = nullptr;
  clCommandNDRangeKernelKHR_fn nd_range = nullptr;
  std::string why_not;  // when unavailable: the reason, for DeviceInfo::name and logs
  bool available() const { return create && finalize && release && enqueue && nd_range; }
  static CommandBufferApi load(cl_device_id device);
};

struct BoundKernel {
  cl_kernel kernel = nullptr;  // owned by the recording
  cl_uint dims = 1;
  size_t global[2] = {1, 1};
};

class ClRecording final : public Recording {
 public:
  // Takes ownership of the kernels and of `scratch` (the attention scores of the recorded steps).
  ClRecording(cl_command_queue queue, std::vector<BoundKernel> kernels, cl_mem scratch);
  ~ClRecording() override;
  // Records the kernels into a command buffer when `api` is available; on failure keeps the kernel list
  // and says why in kind().
  void try_command_buffer(const CommandBufferApi& api);
  Status replay() override;
  std::string_view kind() const override { return kind_; }

 private:
  cl_command_queue queue_;
  std::vector<BoundKernel> kernels_;
  cl_mem scratch_;
  const CommandBufferApi* api_ = nullptr;
  cl_command_buffer_khr command_buffer_ = nullptr;
  std::string kind_ = "opencl kernel list";
};

}  // namespace tessera::ops::opencl
