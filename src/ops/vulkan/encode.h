// The operator contract on Vulkan: which operators a device runs (capability as data) and how each becomes
// dispatches of the shaders in shaders/ (encode). Shared by the eager stream and by recordings.
//
// Internal to src/ops/vulkan. Thread-safety: encode() writes into its target's command buffer (one thread).
#pragma once

#include <functional>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/vulkan/commands.h"

namespace tessera::ops::vulkan {

// Supported, or why not: validate()'s answer first, then what this backend adds (element-aligned views, a
// cache of f32 or f16, head_dim <= 512, tensors no larger than one storage-buffer binding, ...).
Support capability(const Gpu& gpu, const Op& op);

struct EncodeTarget {
  CommandWriter& writer;
  Window error;  // the owning stream's error word
  // A buffer of at least `bytes` for attention scores, valid until the target's commands have run.
  std::function<Result<Window>(size_t bytes)> scratch;
};

// Appends the dispatches of `op` (which capability() accepted).
Status encode(const Op& op, EncodeTarget& target);
// Bytes of attention-score scratch encode(op) asks for (0 for other operators).
size_t scratch_bytes(const Gpu& gpu, const Op& op);

}  // namespace tessera::ops::vulkan
