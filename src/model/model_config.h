// ModelConfig: the architecture hyper-parameters every format reader produces and every consumer
// (engine, solver, servers) reads. Plain data; validate() rejects shapes no backend could run.
//
// One decoder-only transformer covers every supported family; the families differ in the flags below
// (set by the format readers from the architecture name and its metadata):
//   llama / mistral / smollm  the base block: rms_norm, attention, rms_norm, SwiGLU MLP
//   qwen2                     + q/k/v biases
//   qwen3                     + per-head rms_norm of q and k before the rotation (qk_norm)
//   phi3                      the base block; its files fuse q/k/v and gate/up (split at load), longrope
//   gemma2                    + embedding scale sqrt(dim), norms after attention and after the MLP,
//                             GELU(tanh) MLP, attention and final logit soft-capping, sliding-window
//                             layers, attention scale from query_pre_attn_scalar
//   gemma3                    gemma2 without soft-capping, + qk_norm, a separate rotary base for the
//                             sliding-window layers
//   bert                      an encoder, not a decoder (engine/encoder_forward.cc): token + absolute position +
//                             token-type embeddings and a LayerNorm; per layer non-causal attention with q/k/v/o
//                             biases, residual + LayerNorm, up -> GELU(erf) -> down with biases, residual +
//                             LayerNorm; no rotary embedding and no classifier (it serves embeddings only)
// Norm weights are kept as the multiplier itself (what GGUF stores); Hugging Face Gemma checkpoints store
// (w - 1) and are shifted at load and on write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::model {

// How rotary embedding pairs the dimensions of a head. llama2.c and Meta's checkpoints rotate adjacent
// pairs (x[2i], x[2i+1]); Hugging Face checkpoints rotate halves (x[i], x[i + d/2]).
enum class RopeLayout : uint8_t { kInterleaved, kHalf };

// Rotary frequency scaling as configs state it (see model/rope_scaling.h for the arithmetic).
//  - kLinear:   positions divided by `factor` (every frequency times 1/factor)
//  - kLlama3:   per-frequency factors from factor, low/high_freq_factor and original_context (Llama 3.1+);
//               GGUF files carry the resulting factors as the tensor `rope_freqs.weight`
//  - kYarn:     NTK-by-parts blend of interpolated and extrapolated frequencies between beta_fast and
//               beta_slow rotations over original_context, cos/sin scaled by `mscale`
//  - kLongrope: per-frequency factors, the long set beyond original_context and the short set within it
//               (tensors `rope_factors_long.weight` / `rope_factors_short.weight`), cos/sin scaled by mscale
enum class RopeScalingType : uint8_t { kNone, kLinear, kLlama3, kYarn, kLongrope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  int original_context = 0;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  float beta_fast = 32.0f;        // yarn
  float beta_slow = 1.0f;         // yarn
  float mscale = 1.0f;            // yarn, longrope: the multiplier of cos and sin, as the reader resolved it
};

std::string_view rope_scaling_name(RopeScalingType t);  // "none", "linear", "llama3", "yarn", "longrope"

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
  RopeScaling rope_scaling;

  // Family features (see the header comment); all off for llama.
  bool qk_norm = false;             // blk.N.attn_q_norm / attn_k_norm [head_dim]
  bool post_norms = false;          // blk.N.post_attention_norm / post_ffw_norm [dim]
  bool gelu_mlp = false;            // GELU (tanh approximation) instead of SiLU in the gated MLP
  float embedding_scale = 0.0f;     // > 0: embeddings multiplied by it (gemma: sqrt(dim))
  float attn_scale = 0.0f;          // > 0: scores = q.k * attn_scale (else q.k / sqrt(head_dim))
  float attn_softcap = 0.0f;        // > 0: scores = cap * tanh(scores / cap)
  float final_softcap = 0.0f;       // > 0: logits = cap * tanh(logits / cap)
  int sliding_window = 0;           // > 0: sliding layers attend to the last `sliding_window` positions
  int sliding_pattern = 0;          // 1: every layer slides; n > 1: layer l slides when l % n < n - 1
  float rope_theta_sliding = 0.0f;  // > 0: rotary base of the sliding layers, which are then unscaled
  bool causal = true;               // false: every token attends to the whole input (bert)
  int n_token_types = 0;            // bert: rows of token_types.weight (type_vocab_size); type 0 is used

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  bool is_sliding_layer(int layer) const {
    if (sliding_window <= 0 || sliding_pattern <= 0) return false;
    return sliding_pattern == 1 || layer % sliding_pattern < sliding_pattern - 1;
  }
  // Parameters in the transformer (embedding counted once when tied; qwen2's q/k/v biases included).
  int64_t parameter_count() const;
  Status validate() const;
};

// The families (ModelConfig::arch values) Tessera runs, and their feature flags set on `c` (everything but
// the dimensions and the values files carry). Unimplemented naming the supported ones otherwise.
std::vector<std::string> supported_archs();
Status apply_arch_features(ModelConfig& c);

}  // namespace tessera::model
