// llama2.c checkpoints (Karpathy's run.c "legacy" format, version 0).
//
// Layout: 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means the classifier is stored separately), then float32 tensors in this order: token
// embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3 (each for all layers), rms_final, then
// freq_cis_real and freq_cis_imag (seq_len * head_dim / 2 each; unused: rotary angles are recomputed), then
// the classifier when not shared. The file size must match the header exactly, so a truncated or padded
// file is caught before any weight is read; every weight must be finite.
#pragma once

#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model {

struct Llama2cCheckpoint {
  ModelConfig config;
  ModelWeights weights;  // views into the memory-mapped file
};

// Cheap test used when a directory is searched for a checkpoint: does the header describe this file size?
bool looks_like_llama2c_checkpoint(const std::string& path);

Result<Llama2cCheckpoint> load_llama2c_checkpoint(const std::string& path);

// Writes config + weights (f32, names as in weights.h) as a llama2.c checkpoint, freq_cis included.
Status write_llama2c_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& weights);

}  // namespace tessera::model
