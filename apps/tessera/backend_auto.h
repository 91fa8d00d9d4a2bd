// `--backend auto` (the default of `serve` and `generate`): the fastest backend on this host that runs the
// model's weight types as they are stored.
//
// Preference: cuda (a GPU), then cpu (SIMD kernels and threads), then ref (scalar, runs everything). opencl
// is not probed: opening it (PoCL here) costs seconds at every start, and on a CPU it is slower than cpu; a
// host with an OpenCL GPU names it (--backend opencl). A backend
// is passed over when it is not compiled in, has no device here, would widen some weight type to f32 at
// load (widened_weight_types), or lacks an operator the model's layers need (unsupported_layer_features: experts,
// attention sinks); the choice and why the faster ones were passed over are said in the result.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace tessera::cli {

struct ChosenBackend {
  std::string name;
  std::unique_ptr<ops::Device> device;
  std::string reason;  // e.g. "auto: cpu (cuda: not compiled in; ...)"; empty when one was named
};

// `requested` "auto" chooses as above, passing over a backend that does not keep a KV cache of `kv_dtype`
// (q8_0 and q4_0: cpu and ref only); any other name opens that backend as before.
Result<ChosenBackend> open_backend(const std::string& requested, const model::ModelConfig& config,
                                   const model::ModelWeights& weights, const ops::DeviceOptions& options,
                                   DType kv_dtype = DType::kF16);

}  // namespace tessera::cli
