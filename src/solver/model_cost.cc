#include "solver/model_cost.h"

#include <algorithm>
#include <cmath>

namespace tessera::solver {

double ffn_params(const model::ModelConfig& c, int layer) {
  const double d = c.dim;
  if (c.layer_kind(layer).ffn != model::FfnKind::kMoe)
    return (c.arch == "bert" ? 2.0 : 3.0) * d * c.layer_hidden_dim(layer);  // bert's MLP is not gated
  const model::MoeConfig& e = c.moe;
  double p = d * e.n_experts + e.n_experts_used * 3.0 * d * e.expert_hidden_dim;  // the router and the routed experts
  if (e.shared_expert_hidden_dim > 0) p += 3.0 * d * e.shared_expert_hidden_dim + d;  // a shared expert and its gate
  if (e.dense_beside_experts) p += 3.0 * d * c.layer_hidden_dim(layer);               // gemma4's MLP beside them
  return p;
}

ModelCost ModelCost::from_config(const model::ModelConfig& c, double weight_dtype_bytes, double kv_dtype_bytes) {
  ModelCost m;
  const double d = c.dim;
  double matmul = 0, experts = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerKind kind = c.layer_kind(l);
    if (kind.attention == model::AttentionKind::kLinear) {  // qkv (convolved), z gate, beta and alpha, out
      const model::LinearAttentionConfig& la = c.linear;
      matmul += d * la.conv_channels() + d * la.value_dim() + 2.0 * d * la.v_heads + la.value_dim() * d;
    } else {
      const double q = c.layer_q_dim(l), kv = c.layer_kv_dim(l);
      const bool own = c.keeps_kv(l);
      matmul += d * q * (c.attn_output_gate ? 2.0 : 1.0) + q * d + (own ? 2.0 * d * kv : 0.0);
      const double read = 2.0 * kv * kv_dtype_bytes;
      if (own) m.kv_bytes_per_token += read;
      if (own && c.is_sliding_layer(l)) m.sliding_kv_bytes_per_token += read;
      (c.is_sliding_layer(l) ? m.sliding_q_dims : m.full_q_dims) += q;
      (c.is_sliding_layer(l) ? m.sliding_kv_read_bytes : m.full_kv_read_bytes) += read;
    }
    matmul += ffn_params(c, l);
    if (kind.ffn == model::FfnKind::kMoe) experts += 3.0 * d * c.moe.expert_hidden_dim * c.moe.n_experts;
    if (c.per_layer_dim > 0) matmul += 2.0 * d * c.per_layer_dim;  // the per-layer input's gate and projection
  }
  // gemma4: the per-layer inputs' projection from the residual, [n_layers x per_layer_dim, dim], once per token.
  if (c.per_layer_dim > 0) matmul += static_cast<double>(c.n_layers) * c.per_layer_dim * d;
  const double vocab = c.vocab_size;
  double lookup = c.tied_embeddings ? 0.0 : vocab * d;
  if (c.per_layer_dim > 0) lookup += static_cast<double>(c.n_layers) * c.per_layer_dim * vocab;
  m.layer_matmul_params = matmul / std::max(1, c.n_layers);
  m.classifier_params = d * vocab;
  m.weight_bytes = static_cast<double>(c.parameter_count()) * weight_dtype_bytes;
  m.lookup_bytes = lookup * weight_dtype_bytes;
  m.expert_bytes = experts * weight_dtype_bytes;
  m.expert_share = c.moe.n_experts > 0 ? static_cast<double>(c.moe.n_experts_used) / c.moe.n_experts : 0.0;
  m.sliding_window = c.sliding_window > 0 && m.sliding_q_dims > 0 ? c.sliding_window : 0.0;
  // The sliding layers keep only their windows (engine/kv_cache.h: a window shorter than the context) when full
  // layers keep a cache too; a model whose every layer slides (Mistral v0.1, Phi-3) is counted per position, as
  // before (its capacity would be in sequences, not positions). A sequence holds the blocks of its last window - 1
  // positions, one block more where they straddle a boundary, and the step's new block: about the window and two
  // blocks of tessera serve's default 16 positions.
  m.held_kv_bytes_per_token = m.kv_bytes_per_token;
  if (m.sliding_window > 0 && m.sliding_window < c.max_seq_len && m.sliding_kv_bytes_per_token > 0 &&
      m.kv_bytes_per_token > m.sliding_kv_bytes_per_token) {
    m.held_kv_bytes_per_token = m.kv_bytes_per_token - m.sliding_kv_bytes_per_token;
    m.window_held_positions = m.sliding_window + 2 * 16;
  }
  m.state_bytes = static_cast<double>(c.recurrent_state_bytes());
  m.n_layers = c.n_layers;
  m.dim = c.dim;
  return m;
}

double windowed_positions(double past, double chunk, double window) {
  if (chunk <= 0) return 0;
  const double all = chunk * past + chunk * (chunk + 1.0) / 2.0;
  if (window <= 0 || past + chunk <= window) return all;
  if (past >= window) return chunk * window;
  const double below = window - past;  // the chunk's first tokens, which still see fewer than `window` positions
  return below * past + below * (below + 1.0) / 2.0 + (chunk - below) * window;
}

double ModelCost::held_positions(double length) const {
  const double held = held_bytes();
  if (held <= 0) return length;
  const double window = window_held_positions > 0 ? std::min(length, window_held_positions) : 0.0;
  return length + (window * sliding_kv_bytes_per_token + state_bytes) / held;
}

double ModelCost::windowed(double context) const {
  return sliding_window > 0 ? std::min(context, sliding_window) : context;
}

double ModelCost::attention_flops(double past, double chunk) const {
  return 4.0 * (full_q_dims * windowed_positions(past, chunk, 0) +
                sliding_q_dims * windowed_positions(past, chunk, sliding_window));
}

double ModelCost::decode_attention_flops(double context) const {
  return 4.0 * (full_q_dims * context + sliding_q_dims * windowed(context));
}

double ModelCost::decode_kv_read_bytes(double context) const {
  return full_kv_read_bytes * context + sliding_kv_read_bytes * windowed(context);
}

double ModelCost::weight_read_bytes(double tokens) const {
  const double routed = expert_share > 0 ? 1.0 - std::pow(1.0 - expert_share, std::max(1.0, tokens)) : 0.0;
  return weight_bytes - lookup_bytes - expert_bytes + expert_bytes * routed;
}

double ModelCost::prefill_flops(double prompt_tokens) const {
  return linear_flops(prompt_tokens) + attention_flops(0, prompt_tokens) + classifier_flops(1);
}

}  // namespace tessera::solver
