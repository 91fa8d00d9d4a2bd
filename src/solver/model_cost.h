// ModelCost: how much arithmetic and memory traffic one serving step of a decoder-only transformer needs,
// computed once from its ModelConfig. These formulas are the single place the solver turns a model's shape
// into work; the roofline latency model (profile.h) turns work into seconds.
//
// Conventions: a multiply-add is 2 FLOPs. Per token, every weight matrix of every layer is used once
// (2 * parameters FLOPs), attention adds 2 * 2 * q_dim FLOPs per (layer, attended position) for QK^T and
// PV, and the classifier runs only for tokens that are sampled (the last prompt token and every decode
// token). Norms, rotary and softmax are ignored (under 1% of the work at the shapes served here).
//
// Thread-safety: a value.
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace tessera::solver {

struct ModelCost {
  // per layer: wq, wk, wv, wo, w1, w2, w3; a mixture-of-experts layer counts its router and the experts one token
  // is routed to (what a token multiplies), averaged over the layers
  double layer_matmul_params = 0;
  double classifier_params = 0;   // dim * vocab
  double weight_bytes = 0;        // all parameters at the weight dtype (embedding counted once if tied)
  double kv_bytes_per_token = 0;  // 2 (k, v) * layers * kv_dim * kv dtype bytes
  int n_layers = 0;
  int q_dim = 0;
  int dim = 0;

  // weight_dtype_bytes: bytes per weight (2 for f16/bf16, 1.0625 for q8_0 ...); kv_dtype_bytes likewise.
  static ModelCost from_config(const model::ModelConfig& c, double weight_dtype_bytes, double kv_dtype_bytes);

  // FLOPs of the transformer body for `tokens` new tokens (no classifier, no attention).
  double linear_flops(double tokens) const { return 2.0 * layer_matmul_params * n_layers * tokens; }
  // FLOPs of the classifier for `sampled` tokens.
  double classifier_flops(double sampled) const { return 2.0 * classifier_params * sampled; }
  // Attention FLOPs for a chunk of `chunk` new tokens appended after `past` cached positions: token i of
  // the chunk attends to past + i + 1 positions (causal), so the positions sum to
  // chunk * past + chunk * (chunk + 1) / 2.
  double attention_flops(double past, double chunk) const;
  // Attention FLOPs for one decode token whose sequence holds `context` positions (including itself).
  double decode_attention_flops(double context) const { return 4.0 * n_layers * q_dim * context; }
  // Whole-prompt prefill FLOPs (body + attention + classifier for the last token).
  double prefill_flops(double prompt_tokens) const;
};

}  // namespace tessera::solver
