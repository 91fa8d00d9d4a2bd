#include "solver/model_cost.h"

#include <algorithm>

namespace tessera::solver {

ModelCost ModelCost::from_config(const model::ModelConfig& c, double weight_dtype_bytes, double kv_dtype_bytes) {
  ModelCost m;
  double d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  double ffn = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    ffn += c.layer_kind(l).ffn == model::FfnKind::kMoe
               ? d * c.moe.n_experts + 3.0 * d * c.moe.expert_hidden_dim * c.moe.n_experts_used
               : 3.0 * d * h;
  }
  m.layer_matmul_params = d * q + 2.0 * d * kv + q * d + ffn / std::max(1, c.n_layers);
  m.classifier_params = d * static_cast<double>(c.vocab_size);
  m.weight_bytes = static_cast<double>(c.parameter_count()) * weight_dtype_bytes;
  m.kv_bytes_per_token = 2.0 * c.n_layers * kv * kv_dtype_bytes;
  m.n_layers = c.n_layers;
  m.q_dim = c.q_dim();
  m.dim = c.dim;
  return m;
}

double ModelCost::attention_flops(double past, double chunk) const {
  double positions = chunk * past + chunk * (chunk + 1.0) / 2.0;
  return 4.0 * n_layers * q_dim * positions;
}

double ModelCost::prefill_flops(double prompt_tokens) const {
  return linear_flops(prompt_tokens) + attention_flops(0, prompt_tokens) + classifier_flops(1);
}

}  // namespace tessera::solver
