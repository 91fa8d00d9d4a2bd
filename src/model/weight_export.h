// Preparing a model's tensors for a file format: canonical order, rotary layout, storage types.
//
// Writers (GGUF, safetensors) call export_weights() so that every format applies the same rules:
//  - tensors come out in the order of weights.h (embedding, per-layer blocks, output norm, classifier);
//  - Q/K rows (and q/k biases) are permuted when the file's rotary layout differs from the model's;
//  - 2-D matrices are stored as `matrix_dtype` when given (1-D norms and biases stay f32); a block type that
//    does not divide a row falls back to f16, and a type the format cannot hold falls back to f32; each
//    fallback is reported in `notes`.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model {

struct ExportedWeights {
  std::vector<WeightTensor> tensors;  // point into `owned` or into the source weights
  std::vector<std::vector<uint8_t>> owned;
  std::vector<std::string> notes;
};

Result<ExportedWeights> export_weights(const ModelConfig& config, const ModelWeights& weights, RopeLayout file_layout,
                                       std::optional<DType> matrix_dtype, const std::set<DType>& format_dtypes);

// Replaces the 2-D tensors `parts` (same type and width) by one tensor `fused` of their rows in order, at
// the position of the first (Phi-3's qkv and gate_up projections).
Status fuse_rows(ExportedWeights& ex, const std::vector<std::string>& parts, const std::string& fused);

// The names of the tensors a model of this config has, in canonical order (optional biases included only
// when present in `weights`).
std::vector<std::string> canonical_tensor_names(const ModelConfig& config, const ModelWeights& weights);

// Any stored tensor as f32 values.
Result<std::vector<float>> tensor_to_f32(const WeightTensor& t);

}  // namespace tessera::model
