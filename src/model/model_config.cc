#include "model/model_config.h"

#include <fmt/core.h>

namespace tessera::model {

int64_t ModelConfig::parameter_count() const {
  int64_t d = dim, h = hidden_dim, q = q_dim(), kv = kv_dim();
  int64_t per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * h;
  if (arch == "qwen2") per_layer += q + 2 * kv;  // q/k/v biases
  int64_t emb = static_cast<int64_t>(vocab_size) * d;
  return emb * (tied_embeddings ? 1 : 2) + n_layers * per_layer + d;
}

Status ModelConfig::validate() const {
  // Generous limits: the largest open models are well inside them; anything beyond is a corrupt header.
  auto in_range = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  if (!in_range(dim, 1, 1 << 16)) return invalid_argument(fmt::format("dim {} is out of range [1, 65536]", dim));
  if (!in_range(hidden_dim, 1, 1 << 18))
    return invalid_argument(fmt::format("hidden_dim {} is out of range [1, 262144]", hidden_dim));
  if (!in_range(n_layers, 1, 1024))
    return invalid_argument(fmt::format("n_layers {} is out of range [1, 1024]", n_layers));
  if (!in_range(n_heads, 1, 1024))
    return invalid_argument(fmt::format("n_heads {} is out of range [1, 1024]", n_heads));
  if (!in_range(n_kv_heads, 1, n_heads))
    return invalid_argument(fmt::format("n_kv_heads {} is out of range [1, n_heads={}]", n_kv_heads, n_heads));
  if (n_heads % n_kv_heads != 0)
    return invalid_argument(fmt::format("n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads));
  if (!in_range(head_dim, 2, 1024) || head_dim % 2 != 0)
    return invalid_argument(fmt::format("head_dim {} must be even and in [2, 1024]", head_dim));
  if (!in_range(vocab_size, 3, 1 << 22))
    return invalid_argument(fmt::format("vocab_size {} is out of range [3, 4194304]", vocab_size));
  if (!in_range(max_seq_len, 1, 1 << 22))
    return invalid_argument(fmt::format("max_seq_len {} is out of range [1, 4194304]", max_seq_len));
  if (!(rope_theta > 0.0f)) return invalid_argument(fmt::format("rope_theta {} must be positive", rope_theta));
  if (!(norm_eps > 0.0f && norm_eps < 1.0f))
    return invalid_argument(fmt::format("norm_eps {} must be in (0, 1)", norm_eps));
  return ok_status();
}

}  // namespace tessera::model
