#include "kv/host/model_identity.h"

#include <xxhash.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessera::kv {

std::string model_identity(const model::ModelConfig& c, const model::ModelWeights& weights, const std::string& extra) {
  // Every configuration field that changes what K and V hold for a given token prefix.
  const std::string config = fmt::format(
      "arch={} dim={} hidden={} layers={} heads={} kv_heads={} head_dim={} vocab={} ctx={} rope_theta={} eps={} "
      "rope_layout={} scaling={}/{}/{}/{}/{}/{}/{}/{} tied={} qk_norm={} post_norms={} gelu={} emb_scale={} "
      "attn_scale={} softcap={}/{} window={}/{} rope_sliding={}",
      c.arch, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.max_seq_len,
      c.rope_theta, c.norm_eps, static_cast<int>(c.rope_layout), model::rope_scaling_name(c.rope_scaling.type),
      c.rope_scaling.factor, c.rope_scaling.original_context, c.rope_scaling.low_freq_factor,
      c.rope_scaling.high_freq_factor, c.rope_scaling.beta_fast, c.rope_scaling.beta_slow, c.rope_scaling.mscale,
      c.tied_embeddings, c.qk_norm, c.post_norms, c.gelu_mlp, c.embedding_scale, c.attn_scale, c.attn_softcap,
      c.final_softcap, c.sliding_window, c.sliding_pattern, c.rope_theta_sliding);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const model::WeightTensor& t : weights.tensors()) {
    const std::string head = fmt::format("{}:{}:{}", t.name, dtype_name(t.dtype), fmt::join(t.shape, "x"));
    XXH3_64bits_update(st, head.data(), head.size());
    if (t.data != nullptr) XXH3_64bits_update(st, t.data, t.bytes);
  }
  const uint64_t w = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{} weights={:016x}{}{}", config, w, extra.empty() ? "" : " ", extra);
}

}  // namespace tessera::kv
