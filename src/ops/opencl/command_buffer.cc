#include "ops/opencl/command_buffer.h"

#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

namespace tessera::ops::opencl {

CommandBufferApi CommandBufferApi::load(cl_device_id device) {
  CommandBufferApi api;
  if (const char* env = std::getenv("TESSERA_OPENCL_COMMAND_BUFFER"); env && std::strcmp(env, "off") == 0) {
    api.why_not = "TESSERA_OPENCL_COMMAND_BUFFER=off";
    return api;
  }
  size_t n = 0;
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, nullptr, &n);
  std::string ext(n, '\0');
  clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, n, ext.data(), nullptr);
  if (ext.find("cl_khr_command_buffer") == std::string::npos) {
    api.why_not = "the device lacks cl_khr_command_buffer";
    return api;
  }
  // Our queues are created without properties; a device that needs some cannot take our command buffers.
  cl_command_queue_properties required = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR, sizeof required, &required,
                      nullptr) == CL_SUCCESS &&
      required != 0) {
    api.why_not = fmt::format("cl_khr_command_buffer needs queue properties {:#x}", required);
    return api;
  }
  cl_platform_id platform = nullptr;
  clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, nullptr);
  auto get = [platform](const char* name) { return clGetExtensionFunctionAddressForPlatform(platform, name); };
  api.create = reinterpret_cast<clCreateCommandBufferKHR_fn>(get("clCreateCommandBufferKHR"));
  api.finalize = reinterpret_cast<clFinalizeCommandBufferKHR_fn>(get("clFinalizeCommandBufferKHR"));
  api.release = reinterpret_cast<clReleaseCommandBufferKHR_fn>(get("clReleaseCommandBufferKHR"));
  api.enqueue = reinterpret_cast<clEnqueueCommandBufferKHR_fn>(get("clEnqueueCommandBufferKHR"));
  api.nd_range = reinterpret_cast<clCommandNDRangeKernelKHR_fn>(get("clCommandNDRangeKernelKHR"));
  if (!api.available()) api.why_not = "the platform does not export the cl_khr_command_buffer entry points";
  return api;
}

ClRecording::ClRecording(cl_command_queue queue, std::vector<BoundKernel> kernels, cl_mem scratch)
    : queue_(queue), kernels_(std::move(kernels)), scratch_(scratch) {}

ClRecording::~ClRecording() {
  clFinish(queue_);  // a replay may still be running: its kernels and scratch must outlive it
  if (command_buffer_) api_->release(command_buffer_);
  for (BoundKernel& k : kernels_) clReleaseKernel(k.kernel);
  if (scratch_) clReleaseMemObject(scratch_);
}

void ClRecording::try_command_buffer(const CommandBufferApi& api) {
  if (!api.available()) {
    kind_ = fmt::format("opencl kernel list ({})", api.why_not);
    return;
  }
  cl_int e = CL_SUCCESS;
  cl_command_buffer_khr cb = api.create(1, &queue_, nullptr, &e);
  if (e != CL_SUCCESS || cb == nullptr) {
    kind_ = fmt::format("opencl kernel list (clCreateCommandBufferKHR: CL error {})", e);
    return;
  }
  // Commands of a command buffer are not ordered by default: each waits on the previous one's sync point,
  // the order an in-order queue would give.
  cl_sync_point_khr prev = 0;
  for (size_t i = 0; i < kernels_.size() && e == CL_SUCCESS; ++i) {
    const BoundKernel& k = kernels_[i];
    cl_sync_point_khr point = 0;
    e = api.nd_range(cb, nullptr, nullptr, k.kernel, k.dims, nullptr, k.global, nullptr, i == 0 ? 0 : 1,
                     i == 0 ? nullptr : &prev, &point, nullptr);
    prev = point;
  }
  if (e == CL_SUCCESS) e = api.finalize(cb);
  if (e != CL_SUCCESS) {
    api.release(cb);
    kind_ = fmt::format("opencl kernel list (recording the command buffer: CL error {})", e);
    return;
  }
  api_ = &api;
  command_buffer_ = cb;
  kind_ = "cl_khr_command_buffer";
}

Status ClRecording::replay() {
  if (command_buffer_) {
    cl_int e = api_->enqueue(0, nullptr, command_buffer_, 0, nullptr, nullptr);
    if (e == CL_INVALID_OPERATION) {
      // Still pending from the last replay (no simultaneous use): wait for it, then go again.
      clFinish(queue_);
      e = api_->enqueue(0, nullptr, command_buffer_, 0, nullptr, nullptr);
    }
    return e == CL_SUCCESS ? ok_status()
                           : internal_error(fmt::format("opencl: clEnqueueCommandBufferKHR failed (CL error {})", e));
  }
  for (const BoundKernel& k : kernels_) {
    cl_int e = clEnqueueNDRangeKernel(queue_, k.kernel, k.dims, nullptr, k.global, nullptr, 0, nullptr, nullptr);
    if (e != CL_SUCCESS)
      return internal_error(fmt::format("opencl: replaying a recorded kernel failed (CL error {})", e));
  }
  return ok_status();
}

}  // namespace tessera::ops::opencl
