// The operator contract: the fixed set of fused inference operators every backend implements.
//
// Each operator is a plain struct naming its tensors and scalars; `Op` is their variant. Because operators
// are values, the same description serves the eager path (Stream::run executes it), the graph path (a
// recorder stores it for later compilation and replay) and capability queries (Device::supports).
// validate() is the one shape and dtype check shared by every backend, so backends only implement math.
//
// Numerics are defined by `ops/ref`, which follows llama2.c's run.c operation for operation so that greedy
// decoding reproduces its output exactly; other backends are compared with it within stated tolerances.
//
// Conventions: activations are f32 and row-major with tokens as rows. Integer inputs (token ids,
// positions, KV slots, block tables, lengths) are i32 tensors. The KV cache of one layer is two tensors
// [num_blocks, block_tokens, n_kv_heads, head_dim]; a sequence's block table lists its blocks in order, so
// position p lives in block table[p / block_tokens] at row p % block_tokens.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "base/status.h"
#include "model/model_config.h"
#include "ops/tensor.h"

namespace tessera::ops {

using model::RopeLayout;

// out[i] = table[ids[i]] * scale.  table [vocab, dim] (f32), ids i32 [n], out f32 [n, dim]. Gemma scales its
// embeddings by sqrt(dim); scale 1 copies the rows exactly.
struct EmbeddingOp {
  Tensor table, ids, out;
  float scale = 1.0f;
};

// out = x / sqrt(mean(x^2) + eps) * weight, per row.  x, out [n, dim]; weight [dim].
struct RmsNormOp {
  Tensor x, weight, out;
  float eps = 1e-5f;
};

// residual += delta; out = rms_norm(residual) * weight.  The residual stream update fused with the next norm.
struct AddRmsNormOp {
  Tensor residual, delta, weight, out;
  float eps = 1e-5f;
};

// Rotary position embedding applied in place to q [n, n_heads, head_dim] and k [n, n_kv_heads, head_dim]
// for the token positions i32 [n]. Pair j of a head turns by pos * theta^(-2j/head_dim), or, when `freqs`
// (f32 [head_dim / 2]) is given, by pos * freqs[j] with cos and sin multiplied by `mscale`: every rope
// scaling type (linear, llama3, yarn, longrope) reduces to such a table (model/rope_scaling.h).
// rot_dims > 0 (partial rotary, Qwen3.5): only the first rot_dims elements of each head turn, pair j by
// pos * theta^(-2j/rot_dims) (or freqs [rot_dims / 2]); the rest pass through. 0: the whole head.
struct RopeOp {
  Tensor q, k, positions;
  float theta = 10000.0f;
  RopeLayout layout = RopeLayout::kInterleaved;
  Tensor freqs;         // optional: per-pair inverse frequencies
  float mscale = 1.0f;  // only with freqs
  int32_t rot_dims = 0;
  int64_t rotated(int64_t head_dim) const { return rot_dims > 0 ? rot_dims : head_dim; }
};

// Score options shared by both attention operators. Defaults are plain causal attention with scores
// q.k / sqrt(head_dim). scale > 0: scores q.k * scale (Gemma's query_pre_attn_scalar). softcap > 0:
// scores cap * tanh(score / cap) before the softmax (Gemma 2). window > 0: a query at position p attends
// only to positions p - window + 1 .. p (sliding-window layers).
struct AttentionScores {
  float scale = 0.0f;
  float softcap = 0.0f;
  int32_t window = 0;
  bool is_default() const { return scale == 0.0f && softcap == 0.0f && window == 0; }
};

// Stores k, v [n, n_kv_heads, head_dim] into the paged caches at slots i32 [n]
// (slot = block * block_tokens + row).
struct KvWriteOp {
  Tensor k, v, k_cache, v_cache, slots;
};

// Causal attention for n consecutive tokens of ONE sequence at positions start_pos .. start_pos + n - 1,
// whose keys and values (these n included) are already in the cache. q [n, n_heads, head_dim],
// block_table i32 [max_blocks], out [n, n_heads, head_dim]. Query head h reads kv head h / (n_heads / n_kv_heads).
// sinks (optional f32 [n_heads], gpt-oss): head h's softmax has one more logit, sinks[h], that takes probability
// but reads no value: p_t = exp(s_t - m) / (sum_t exp(s_t - m) + exp(sinks[h] - m)), m = max(max_t s_t, sinks[h]).
struct AttentionPrefillOp {
  Tensor q, k_cache, v_cache, block_table, out;
  int32_t start_pos = 0;
  AttentionScores scores;
  Tensor sinks;  // optional
};

// One new token for each of b sequences. q [b, n_heads, head_dim]; block_tables i32 [b, max_blocks];
// context_lens i32 [b] (the new token included: it sits at position context_lens[i] - 1); out like q.
struct AttentionDecodeOp {
  Tensor q, k_cache, v_cache, block_tables, context_lens, out;
  AttentionScores scores;
  Tensor sinks;  // optional, as AttentionPrefillOp's
};

// out [n, m] = x [n, k] . w[m, k]^T (+ bias [m] when given; Qwen2's q/k/v projections have one).
// w is stored as rows of outputs, as every checkpoint format does.
struct MatMulOp {
  Tensor x, w, out;
  Tensor bias;  // optional: f32 [m]
};

// The gated MLP activation: out = act(gate) * up, elementwise.  gate, up, out [n, hidden]. act is SiLU
// (Llama, Qwen, Phi-3) or GELU with the tanh approximation (Gemma: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// evaluated as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) to avoid cancellation for negative x).
// kSwigluOai is gpt-oss's clamped form, taken by MoeExpertsOp only: g = min(gate, limit),
// u = clamp(up, -limit, limit), out = g / (1 + exp(-alpha g)) * (u + 1).
// kGeluErf (BERT's "gelu": 0.5 x (1 + erf(x / sqrt 2))) is taken by ActivationOp only.
// kSigmoid (silu_mul only): out = up / (1 + exp(-gate)), Qwen3.5's gate on its attention output.
// kTanh (ActivationOp only): tanh x; with two ScaleOps around it, Gemma's final logit softcap cap * tanh(x / cap).
enum class Activation : uint8_t { kSilu, kGeluTanh, kSwigluOai, kGeluErf, kSigmoid, kTanh };
struct SiluMulOp {
  Tensor gate, up, out;
  Activation act = Activation::kSilu;
};

// out = a + b, elementwise (out may alias a).
struct AddOp {
  Tensor a, b, out;
};

// Row-wise softmax of x [n, m] into out [n, m].
struct SoftmaxOp {
  Tensor x, out;
};

// out i32 [n] = index of the first maximum of each row of x [n, m].
struct ArgmaxOp {
  Tensor x, out;
};

// Mixture of experts, part 1: each row's experts. logits f32 [n, E] (the router's matmul) -> ids i32 [n, k] and
// weights f32 [n, k]: the k experts each row is routed to, in descending order of their selection score (ties:
// the lower expert first), and the weight of each:
//   kSoftmax        p = softmax(logits); the k largest p (+ bias); weights p of the chosen      (Qwen3-MoE, Mixtral)
//   kSigmoid        p = sigmoid(logits); the k largest p (+ bias); weights p of the chosen
//   kSoftmaxWeight  the k largest logits (+ bias); weights softmax over those k logits           (gpt-oss)
// then with `normalize` weights / max(sum of the k weights, 6.103515625e-5) (llama.cpp's clamp), then times
// `scale`, then (expert_scale, optional f32 [E]) each weight times its expert's scale. bias (optional f32 [E]) shifts
// the selection only, never the weights (DeepSeek-V3's correction bias). This is llama.cpp's build_moe_ffn routing
// for these gating functions; expert_scale is its per-expert output scale (Gemma 4's ffn_down_exps.scale, which
// llama.cpp multiplies into each expert's down projection: the same product, taken before the sum over slots).
enum class MoeGating : uint8_t { kSoftmax, kSigmoid, kSoftmaxWeight };
struct MoeRouteOp {
  Tensor logits, ids, weights;
  Tensor bias;          // optional
  Tensor expert_scale;  // optional
  MoeGating gating = MoeGating::kSoftmax;
  bool normalize = false;
  float scale = 1.0f;
};

// Mixture of experts, part 2: out [n, dim] = sum over slots j = 0 .. k-1, in that order, of
// weights[t, j] * FFN_e(x[t]) with e = ids[t, j], where
//   FFN_e(x) = down[e] . act(gate[e] . x + gate_bias[e], up[e] . x + up_bias[e]) + down_bias[e]
// x f32 [n, dim]; ids i32 [n, k] (each in [0, E), else OutOfRange); weights f32 [n, k]; gate, up [E, ff, dim] and
// down [E, dim, ff] in any matmul weight type (each expert's slice is a matrix as MatMulOp takes it), or instead
// of gate and up one gate_up [E, 2 ff, dim] whose expert slices hold gate's rows then up's (llama.cpp's
// ffn_gate_up_exps); biases optional f32 [E, ff], [E, ff], [E, dim]; act as SiluMulOp (kSwigluOai with alpha and
// limit). Every row's result is the same whatever else is in the batch. The cpu backend computes each expert once per
// call over all the rows routed to it (one read of its weights per step); opencl gives each output its own
// work-item, which reads its expert's row.
struct MoeExpertsOp {
  Tensor x, ids, weights, gate, up, down, out;
  Tensor gate_bias, up_bias, down_bias;  // optional
  Tensor gate_up;                        // optional: replaces gate and up (which are then left empty)
  Activation act = Activation::kSilu;
  float alpha = 1.702f, limit = 7.0f;  // kSwigluOai only
};

// Encoder models (BERT) and embeddings: layer_norm, activation, attention_noncausal and pool.
//
// out = (x - mean) / sqrt(var + eps) * weight + bias, per row, var the population variance of the row (what
// torch.nn.LayerNorm computes).  x, out [n, dim] (out may alias x); weight [dim]; bias [dim], optional.
struct LayerNormOp {
  Tensor x, weight, bias, out;
  float eps = 1e-12f;
};

// out = act(x), elementwise, ungated (BERT's feed-forward): kSilu x / (1 + exp(-x)), kGeluTanh as SiluMulOp's,
// kGeluErf 0.5 x (1 + erf(x / sqrt 2)), kTanh tanh x (+-1 at +-inf, NaN for NaN).  x, out [n, width] (out may alias x).
struct ActivationOp {
  Tensor x, out;
  Activation act = Activation::kGeluErf;
};

// out = x * scale, elementwise (out may alias x).  x, out f32 of any shape. Gemma 4 scales its per-layer embedding
// inputs and each layer's output by constants.
struct ScaleOp {
  Tensor x, out;
  float scale = 1.0f;
};

// Non-causal (bidirectional) attention over the n tokens of ONE sequence: every query attends to all n keys,
// those after it included; no KV cache (an encoder computes a whole input in one step). q [n, n_heads, head_dim],
// k, v [n, n_kv_heads, head_dim], out like q; query head h reads kv head h / (n_heads / n_kv_heads). Scores are
// q.k / sqrt(head_dim), or q.k * scale when scale > 0; softmax subtracts the row's maximum.
struct AttentionNonCausalOp {
  Tensor q, k, v, out;
  float scale = 0.0f;
};

// The rows of x [n, dim] pooled into out [1, dim]: kMean their average (sum in row order, then divided by n),
// kFirst row 0 (BERT's [CLS] token), kLast row n - 1 (a causal model's summary of the whole input).
enum class PoolKind : uint8_t { kMean, kFirst, kLast };
struct PoolOp {
  Tensor x, out;
  PoolKind kind = PoolKind::kMean;
};

// Splits each head of x [n, H, 2 d] into its halves: a [n, H, d] gets the first d elements, b the last d (Qwen3.5's
// query projection holds each head's query and then its output gate).
struct SplitHeadsOp {
  Tensor x, a, b;
};

// Gated delta-net linear attention (Qwen3.5's linear-attention layers), part 1: the short causal convolution over
// n consecutive new tokens of ONE sequence, with the window that sequence carries. x f32 [n, C]; weight f32 [C, K];
// state f32 [K - 1, C], in and out: the K - 1 inputs before x's first row (read as zeros when `reset`), replaced by
// the last K - 1 rows of w = [state; x]. out [n, C]: out[t][c] = silu(sum_{i<K} weight[c][i] w[t + i][c]), the sum
// taken in order of i (llama.cpp's ssm_conv followed by its silu).
struct CausalConv1dOp {
  Tensor x, weight, state, out;
  bool reset = false;
};

// Part 2: the gated delta rule over n consecutive new tokens of ONE sequence, with the state it carries.
// qkv f32 [n, 2 Hk S + Hv S] (the convolution's output: Hk query heads, Hk key heads, then Hv value heads, each S
// wide; Hk = k_heads, Hv a multiple of it); alpha, beta f32 [n, Hv] (raw projections); dt_bias, a f32 [Hv] (a is
// -exp(A_log), as GGUF's ssm_a stores it); state f32 [Hv, S, S], in and out (zeros when `reset`): state[h][j][i]
// pairs value element j with key element i; out f32 [n, Hv, S]. Value head h reads key head h % Hk (the order
// llama.cpp's converter gives the value heads). Per token and value head, in order:
//   q, k = x / max(|x|, eps) (l2 norm); g = exp(softplus(alpha + dt_bias) a); b = sigmoid(beta)
//   state *= g; d_j = (v_j - sum_i state[j][i] k_i) b; state[j][i] += d_j k_i; out_j = sum_i state[j][i] q_i / sqrt(S)
// softplus(x) = x above 20, else log(1 + exp(x)) (ggml's). This is llama.cpp's recurrent (fused) form.
struct GatedDeltaRuleOp {
  Tensor qkv, alpha, beta, dt_bias, a, state, out;
  int32_t k_heads = 0;
  float eps = 1e-6f;
  bool reset = false;
};

using Op =
    std::variant<EmbeddingOp, RmsNormOp, AddRmsNormOp, RopeOp, KvWriteOp, AttentionPrefillOp, AttentionDecodeOp,
                 MatMulOp, SiluMulOp, AddOp, SoftmaxOp, ArgmaxOp, MoeRouteOp, MoeExpertsOp, LayerNormOp, ActivationOp,
                 AttentionNonCausalOp, PoolOp, SplitHeadsOp, CausalConv1dOp, GatedDeltaRuleOp, ScaleOp>;

// "embedding", "rms_norm", "add_rms_norm", "rope", "kv_write", "attention_prefill", "attention_decode",
// "matmul", "silu_mul", "add", "softmax", "argmax", "moe_route", "moe_experts", "layer_norm", "activation",
// "attention_noncausal", "pool", "split_heads", "causal_conv1d", "gated_delta_rule", "scale".
std::string_view op_name(const Op& op);

// InvalidArgument naming the operator and the offending tensor when shapes or dtypes disagree, a tensor is
// missing, or a view runs past the end of its buffer.
Status validate(const Op& op);

}  // namespace tessera::ops
