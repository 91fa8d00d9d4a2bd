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
//   qwen3moe                  qwen3 whose feed-forward is a mixture of experts (softmax, top-k, renormalised)
//   llama + experts (Mixtral) llama whose feed-forward is a mixture of experts (softmax, top-k, renormalised)
//   gpt-oss                   q/k/v/o biases, attention sinks, every other layer sliding (window 128), YaRN;
//                             experts with biases routed by softmax over the top k (router bias), clamped SwiGLU
//                             (alpha 1.702, limit 7); its file names the pre-FFN norm post_attention_norm
//   qwen35 / qwen35moe        hybrid: three of every four layers are gated delta-net linear attention (a causal
//                             convolution and a recurrent state per sequence, `linear`), every fourth full attention
//                             with a sigmoid output gate (its q projection holds each head's query then its gate),
//                             q/k norms and partial rotary (rope_dims of head_dim; M-RoPE sections, which for text
//                             positions are plain rotate-half); qwen35moe's experts add a shared expert whose
//                             output is scaled by sigmoid(x . ffn_gate_inp_shexp); the pre-FFN norm is again named
//                             post_attention_norm in files
//   gemma4 (E2B / E4B)        gemma3's block with per-layer attention geometry: sliding layers have heads of
//                             head_dim_sliding, full layers of head_dim (and "proportional" rotary through
//                             rope_freqs.weight); the last shared_kv_layers layers read the K and V of the last
//                             earlier layer of their kind instead of writing their own; V is RMS-normed without a
//                             weight; attention scale 1; layers may differ in MLP width (layer_hidden_dims); after
//                             the MLP each layer adds a gated projection of its per-layer embedding (per_layer_dim)
//                             and multiplies its output by blk.N.layer_output_scale
//   gemma4 (26B-A4B)          the same block without per-layer embeddings, KV heads per layer (layer_kv_heads),
//                             full layers without attn_v (V is their K projection, normed alone), and a mixture of
//                             128 GELU experts beside the dense MLP (MoeConfig::dense_beside_experts)
// What each layer holds is data too (LayerKind): its attention (full softmax attention, or gated delta-net linear
// attention with a recurrent state) and its feed-forward (a dense gated MLP of hidden_dim, or the mixture of experts
// `moe` describes). The runner dispatches on the kind, so a hybrid model is a list of kinds, not a new family.
// Norm weights are kept as the multiplier itself (what GGUF stores); Hugging Face Gemma checkpoints store
// (w - 1) and are shifted at load and on write.
#pragma once

#include <algorithm>
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

// How a mixture-of-experts layer weighs its experts from the router's logits (ops::MoeRouteOp computes it):
//  - kSoftmax:       softmax over all experts, then the k largest (Qwen3-MoE, Mixtral; llama.cpp's SOFTMAX = 1)
//  - kSigmoid:       sigmoid of each logit, then the k largest (+ a selection bias where the file has one;
//                    llama.cpp's SIGMOID = 2)
//  - kSoftmaxWeight: the k largest logits, then softmax over those k (gpt-oss; llama.cpp's SOFTMAX_WEIGHT)
enum class ExpertGating : uint8_t { kSoftmax, kSigmoid, kSoftmaxWeight };
std::string_view expert_gating_name(ExpertGating g);  // "softmax", "sigmoid", "softmax_weight"

struct MoeConfig {
  int n_experts = 0;          // experts per MoE layer (GGUF expert_count)
  int n_experts_used = 0;     // experts each token is routed to (expert_used_count)
  int expert_hidden_dim = 0;  // feed-forward width of one expert (expert_feed_forward_length)
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize_weights = false;  // the k chosen weights divided by their sum (expert_weights_norm)
  float weights_scale = 1.0f;      // then multiplied by this (expert_weights_scale)
  // > 0: the experts' activation is gpt-oss's clamped SwiGLU with this limit (and alpha 1.702, as llama.cpp);
  // 0: SiLU(gate) * up.
  float swiglu_limit = 0.0f;
  // > 0: a shared expert of this width runs beside the routed ones on every token, its output scaled by
  // sigmoid(x . ffn_gate_inp_shexp) (Qwen3.5-MoE; expert_shared_feed_forward_length).
  int shared_expert_hidden_dim = 0;
  // Gemma 4 (26B-A4B; llama.cpp's gemma4 graph): beside the experts every token also runs the layer's dense MLP
  // (ffn_gate/up/down, hidden_dim wide, GELU), each branch with norms of its own: the MLP reads ffn_norm(x) and is
  // normed by post_ffw_norm_1, the experts read pre_ffw_norm_2(x) and are normed by post_ffw_norm_2, and the two are
  // added (then post_ffw_norm as in every gemma layer). The router reads rms_norm(x) / sqrt(dim) * ffn_gate_inp.scale
  // of the residual stream x (not the experts' input), and expert e's output is scaled by ffn_down_exps.scale[e].
  bool dense_beside_experts = false;
  bool enabled() const { return n_experts > 0; }
};

// Gated delta-net linear attention (Qwen3.5's kLinear layers; GGUF ssm.* keys). The input projection gives
// q and k (k_heads heads each) and v (v_heads heads), each head_dim wide, convolved causally over conv_kernel
// positions; the recurrent state is v_heads matrices head_dim x head_dim per sequence.
struct LinearAttentionConfig {
  int conv_kernel = 0;  // ssm.conv_kernel
  int k_heads = 0;      // ssm.group_count (linear_num_key_heads)
  int v_heads = 0;      // ssm.time_step_rank (linear_num_value_heads)
  int head_dim = 0;     // ssm.state_size (linear_key_head_dim = linear_value_head_dim)
  bool enabled() const { return conv_kernel > 0; }
  int conv_channels() const { return (2 * k_heads + v_heads) * head_dim; }
  int value_dim() const { return v_heads * head_dim; }
  // f32 elements a sequence carries per linear layer: the convolution's window and the delta rule's state.
  int64_t conv_state_elems() const { return static_cast<int64_t>(conv_kernel - 1) * conv_channels(); }
  int64_t recurrent_state_elems() const { return static_cast<int64_t>(v_heads) * head_dim * head_dim; }
};

enum class AttentionKind : uint8_t { kFull, kLinear };
enum class FfnKind : uint8_t { kDense, kMoe };
struct LayerKind {
  AttentionKind attention = AttentionKind::kFull;
  FfnKind ffn = FfnKind::kDense;
  bool operator==(const LayerKind&) const = default;
};

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
  bool attn_sinks = false;          // blk.N.attn_sinks.weight [n_heads]: one more softmax logit per head (gpt-oss)
  bool attn_output_gate = false;    // full attention: q projection [n_heads, 2 head_dim], out *= sigmoid(gate) (qwen35)
  int rope_dims = 0;                // > 0: only the first rope_dims of each head rotate (partial rotary)
  std::vector<int> rope_sections;   // M-RoPE sections (qwen35: 4 values), empty otherwise
  LinearAttentionConfig linear;     // the kLinear layers' shape
  // Gemma 4 (see the header comment); all off elsewhere.
  int head_dim_sliding = 0;            // > 0: head size of the sliding layers (head_dim is the full layers')
  std::vector<int> layer_hidden_dims;  // empty: every layer hidden_dim wide; else one width per layer
  int shared_kv_layers = 0;            // the last this many layers reuse earlier layers' K and V
  int per_layer_dim = 0;               // > 0: per-layer embeddings of this width
  bool v_norm = false;                 // V is RMS-normed per head, without a weight
  bool layer_output_scale = false;     // blk.N.layer_output_scale.weight [1] multiplies each layer's output
  // Empty: every layer has n_kv_heads KV heads; else one count per layer (26B-A4B: 8 in sliding layers, 2 in full
  // ones), n_kv_heads then being the largest.
  std::vector<int> layer_kv_heads;

  MoeConfig moe;  // the experts of kMoe layers
  // The kinds of the layers as a repeating pattern: layer l is layer_kinds[l % size] (one entry: every layer alike;
  // n_layers entries: each layer named). Empty: every layer full attention with a dense FFN. A pattern keeps its
  // meaning when a test or `tessera synth --layers` changes n_layers.
  std::vector<LayerKind> layer_kinds;

  LayerKind layer_kind(int layer) const {
    return layer_kinds.empty() ? LayerKind{} : layer_kinds[static_cast<size_t>(layer) % layer_kinds.size()];
  }
  bool has_moe_layers() const;
  bool has_linear_layers() const;
  int linear_layer_count() const;
  // f32 bytes of recurrent state one sequence carries (every linear layer's window and state); 0 without them.
  size_t recurrent_state_bytes() const;
  // Every layer's feed-forward made `kind` (the families whose layers are all alike).
  void set_all_ffn(FfnKind kind);
  // The shortest form of layer_kinds: one entry when all are alike, none when that entry is the default.
  void compact_layer_kinds();

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Per layer (they equal head_dim, q_dim(), kv_dim() and hidden_dim except in gemma4).
  int layer_head_dim(int layer) const {
    return head_dim_sliding > 0 && is_sliding_layer(layer) ? head_dim_sliding : head_dim;
  }
  int layer_q_dim(int layer) const { return n_heads * layer_head_dim(layer); }
  int layer_n_kv_heads(int layer) const {
    return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[static_cast<size_t>(layer)];
  }
  int layer_kv_dim(int layer) const { return layer_n_kv_heads(layer) * layer_head_dim(layer); }
  int layer_hidden_dim(int layer) const {
    return layer_hidden_dims.empty() ? hidden_dim : layer_hidden_dims[static_cast<size_t>(layer)];
  }
  int max_head_dim() const { return std::max(head_dim, head_dim_sliding); }
  int max_hidden_dim() const;
  // The layer whose K and V `layer` attends over: itself, or for the last shared_kv_layers layers llama.cpp's
  // choice, the last layer before them of the same kind (sliding or full).
  int kv_source_layer(int layer) const;
  // Every layer has K and V of its own, all kv_dim() wide: what KV export / import (PD, KV connectors) and the
  // solver's and budget's per-token sizes assume.
  bool uniform_kv() const { return head_dim_sliding <= 0 && shared_kv_layers == 0 && layer_kv_heads.empty(); }
  // Whether `layer` keeps K and V of its own: an attention layer that reads no other layer's (linear layers keep a
  // recurrent state instead). The layers a KV cache allocates, and the layers KV export, tiers and hand-offs carry.
  bool keeps_kv(int layer) const {
    return layer_kind(layer).attention != AttentionKind::kLinear && kv_source_layer(layer) == layer;
  }
  // The layers that keep K and V, and the K (or V) elements one cached position holds over them.
  int cached_kv_layers() const;
  int64_t cached_kv_width() const;
  bool is_sliding_layer(int layer) const {
    if (sliding_window <= 0 || sliding_pattern <= 0) return false;
    return sliding_pattern == 1 || layer % sliding_pattern < sliding_pattern - 1;
  }
  // Parameters in the transformer (embedding counted once when tied; qwen2's q/k/v biases included; every
  // expert of MoE layers).
  int64_t parameter_count() const;
  // Parameters one token's forward pass reads: MoE layers count their router and n_experts_used experts.
  int64_t active_parameter_count() const;
  Status validate() const;
};

// The families (ModelConfig::arch values) Tessera runs, and their feature flags set on `c` (everything but
// the dimensions and the values files carry). Unimplemented naming the supported ones otherwise.
std::vector<std::string> supported_archs();
Status apply_arch_features(ModelConfig& c);

}  // namespace tessera::model
