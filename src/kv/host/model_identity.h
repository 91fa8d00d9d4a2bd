// model_identity: what a persistent KV tier keys its blocks by, so that KV computed for one model is never used
// for another: a digest of the model's configuration (everything that shapes its KV: sizes, rotary, norms) and
// of every weight tensor's name, type, shape and bytes, plus `extra` (how the node runs it: the backend, a weight
// conversion), as text. Hashing the weights reads them once (a few GB/s); `tessera serve` does it only when a disk
// tier is configured.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::kv {

std::string model_identity(const model::ModelConfig& config, const model::ModelWeights& weights,
                           const std::string& extra = "");

}  // namespace tessera::kv
