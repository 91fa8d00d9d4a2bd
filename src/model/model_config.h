// ModelConfig: the architecture hyper-parameters every format reader produces and every consumer
// (engine, solver, servers) reads. Plain data; validate() rejects shapes no backend could run.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace tessera::model {

// How rotary embedding pairs the dimensions of a head. llama2.c and Meta's checkpoints rotate adjacent
// pairs (x[2i], x[2i+1]); Hugging Face checkpoints rotate halves (x[i], x[i + d/2]).
enum class RopeLayout : uint8_t { kInterleaved, kHalf };

struct ModelConfig {
  std::string arch = "llama";
  int dim = 0;         // residual stream width
  int hidden_dim = 0;  // feed-forward width
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // < n_heads: grouped-query attention
  int vocab_size = 0;
  int max_seq_len = 0;  // positions the model was trained for
  int head_dim = 0;     // dim / n_heads unless the format says otherwise
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeLayout rope_layout = RopeLayout::kInterleaved;
  bool tied_embeddings = true;  // classifier shares the token embedding

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Parameters in the transformer (embedding counted once when tied; qwen2's q/k/v biases included).
  int64_t parameter_count() const;
  Status validate() const;
};

}  // namespace tessera::model
