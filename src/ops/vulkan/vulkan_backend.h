// The vulkan backend: GLSL compute shaders compiled to SPIR-V at build time (glslc) and embedded in the
// binary, run on any Vulkan 1.0+ device with a compute queue: GPUs in the field, lavapipe (Mesa's software
// Vulkan device, on the host CPU) in CI. Built only where CMake finds the Vulkan headers and loader and
// glslc (TESSERA_VULKAN); registered by ops/registry_builtin.cc.
//
// Devices: every physical device the loader lists, GPUs before CPU devices (so device 0, what `--backend
// vulkan` opens, is a GPU where one exists); `tessera inspect --devices` describes them in that order. The
// loader's own variables narrow the list (VK_ICD_FILENAMES / VK_DRIVER_FILES: one driver's devices only).
// Operators: every operator of the contract but the mixture-of-experts and encoder ones (moe_route, moe_experts,
// layer_norm, activation, attention_noncausal, pool: refused by name), with matmul and embedding for every stored
// weight type (f32, f16, bf16 and the GGUF block types, widened in the shader) and a KV cache of f32 or f16; what a
// device cannot run is declined by Device::supports with the reason. Graphs: a stream records an operator list
// into a command buffer once and replays it (ops/vulkan/stream.h).
#pragma once

#include <memory>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::vulkan {

// Unavailable with the reason when there is no Vulkan loader, driver or device.
Result<std::unique_ptr<Backend>> create_backend();

}  // namespace tessera::ops::vulkan
