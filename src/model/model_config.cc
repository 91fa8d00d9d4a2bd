#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tessera::model {

std::string_view rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
    case RopeScalingType::kLongrope:
      return "longrope";
  }
  return "?";
}

std::string_view expert_gating_name(ExpertGating g) {
  switch (g) {
    case ExpertGating::kSoftmax:
      return "softmax";
    case ExpertGating::kSigmoid:
      return "sigmoid";
    case ExpertGating::kSoftmaxWeight:
      return "softmax_weight";
  }
  return "?";
}

std::vector<std::string> supported_archs() {
  return {"llama", "qwen2",   "qwen3", "qwen3moe", "gemma2",    "gemma3",
          "phi3",  "gpt-oss", "bert",  "qwen35",   "qwen35moe", "gemma4"};
}

int ModelConfig::max_hidden_dim() const {
  int h = hidden_dim;
  for (int v : layer_hidden_dims) h = std::max(h, v);
  return h;
}

int ModelConfig::kv_source_layer(int layer) const {
  const int first_shared = n_layers - shared_kv_layers;
  if (shared_kv_layers <= 0 || layer < first_shared) return layer;
  return first_shared - (is_sliding_layer(layer) ? 2 : 1);
}

int ModelConfig::cached_kv_layers() const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += keeps_kv(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::cached_kv_width() const {
  int64_t w = 0;
  for (int l = 0; l < n_layers; ++l)
    if (keeps_kv(l)) w += layer_kv_dim(l);
  return w;
}

bool ModelConfig::has_linear_layers() const { return linear_layer_count() > 0; }

int ModelConfig::linear_layer_count() const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += layer_kind(l).attention == AttentionKind::kLinear ? 1 : 0;
  return n;
}

size_t ModelConfig::recurrent_state_bytes() const {
  return static_cast<size_t>(linear_layer_count()) *
         static_cast<size_t>(linear.conv_state_elems() + linear.recurrent_state_elems()) * sizeof(float);
}

bool ModelConfig::has_moe_layers() const {
  for (int l = 0; l < n_layers; ++l)
    if (layer_kind(l).ffn == FfnKind::kMoe) return true;
  return false;
}

void ModelConfig::set_all_ffn(FfnKind kind) {
  if (layer_kinds.empty()) layer_kinds.resize(1);
  for (LayerKind& k : layer_kinds) k.ffn = kind;
  compact_layer_kinds();
}

void ModelConfig::compact_layer_kinds() {
  if (layer_kinds.empty()) return;
  const LayerKind first = layer_kinds.front();
  if (std::all_of(layer_kinds.begin(), layer_kinds.end(), [&](const LayerKind& k) { return k == first; }))
    layer_kinds.assign(first == LayerKind{} ? 0 : 1, first);
}

Status apply_arch_features(ModelConfig& c) {
  const std::string& a = c.arch;
  bool known = false;
  for (const std::string& s : supported_archs()) known = known || s == a;
  if (!known)
    return unimplemented(
        fmt::format("architecture '{}' is not supported (supported: {})", a, fmt::join(supported_archs(), ", ")));
  // llama.cpp rotates llama's tensors in adjacent pairs (its converter permutes Q/K) and every other
  // family's in halves, as their Hugging Face checkpoints do.
  c.rope_layout = a == "llama" ? RopeLayout::kInterleaved : RopeLayout::kHalf;
  const bool qwen35 = a == "qwen35" || a == "qwen35moe";
  c.qk_norm = a == "qwen3" || a == "qwen3moe" || a == "gemma3" || qwen35;
  c.attn_output_gate = qwen35;
  if (a == "qwen35moe") {  // llama.cpp's qwen35moe: softmax over the experts, top k, renormalised
    c.moe.gating = ExpertGating::kSoftmax;
    c.moe.normalize_weights = true;
  }
  // llama.cpp's routing for these families (its build_moe_ffn arguments): softmax over every expert, the top k,
  // their weights renormalised to sum 1. The counts come from the file; a llama file is a Mixtral when it has
  // experts.
  if (a == "qwen3moe" || a == "llama" || a == "gemma4") {
    c.moe.gating = ExpertGating::kSoftmax;
    c.moe.normalize_weights = true;
  }
  c.moe.dense_beside_experts = a == "gemma4";  // only read where the file has experts (26B-A4B)
  if (a == "gpt-oss") {
    // llama.cpp's openai-moe: SOFTMAX_WEIGHT routing, no renormalisation, LLM_FFN_SWIGLU_OAI_MOE (alpha 1.702,
    // limit 7), sinks, sliding window on every other layer starting with layer 0.
    c.moe.gating = ExpertGating::kSoftmaxWeight;
    c.moe.normalize_weights = false;
    c.moe.swiglu_limit = 7.0f;
    c.attn_sinks = true;
    c.sliding_pattern = 2;
  }
  const bool gemma = a == "gemma2" || a == "gemma3" || a == "gemma4";
  c.post_norms = gemma;
  c.gelu_mlp = gemma;
  c.qk_norm = c.qk_norm || a == "gemma4";
  c.v_norm = a == "gemma4";
  c.layer_output_scale = a == "gemma4";
  if (a == "gemma4") c.attn_scale = 1.0f;  // llama.cpp's f_attention_scale: q and k are RMS-normed instead
  c.embedding_scale = gemma ? std::sqrt(static_cast<float>(c.dim)) : 0.0f;
  if (a == "gemma2") c.sliding_pattern = 2;
  if (a == "gemma3") c.sliding_pattern = 6;
  if (a == "phi3" || a == "llama") c.sliding_pattern = 1;  // Mistral v0.1 and Phi-3 slide in every layer
  c.causal = a != "bert";
  return ok_status();
}

namespace {

int64_t count_parameters(const ModelConfig& c, bool active_only) {
  const int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  if (c.arch == "bert") {  // q/k/v/o and up/down with biases, two LayerNorms per layer; three tables and their norm
    const int64_t per_layer = d * q + q + 2 * (d * kv + kv) + q * d + d + 2 * d * h + h + d + 4 * d;
    return static_cast<int64_t>(c.vocab_size + c.max_seq_len + c.n_token_types) * d + 2 * d + c.n_layers * per_layer;
  }
  int64_t attention = 2 * d + d * q + 2 * d * kv + q * d;
  if (c.arch == "qwen2") attention += q + 2 * kv;        // q/k/v biases
  if (c.arch == "gpt-oss") attention += q + 2 * kv + d;  // q/k/v/o biases
  if (c.attn_sinks) attention += c.n_heads;
  if (c.qk_norm) attention += 2 * c.head_dim;
  if (c.post_norms) attention += 2 * d;
  const int64_t experts = active_only ? c.moe.n_experts_used : c.moe.n_experts;
  int64_t total = 0;
  const LinearAttentionConfig& la = c.linear;
  const int64_t linear_attention = 2 * d + d * la.conv_channels() + d * la.value_dim() + 2 * d * la.v_heads +
                                   static_cast<int64_t>(la.conv_kernel) * la.conv_channels() + 2 * la.v_heads +
                                   la.head_dim + la.value_dim() * d;
  const int64_t gated_q = c.attn_output_gate ? d * q : 0;
  const int64_t shared = c.moe.shared_expert_hidden_dim > 0 ? 3 * d * c.moe.shared_expert_hidden_dim + d : 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.uniform_kv()) {
      total += c.layer_kind(l).attention == AttentionKind::kLinear ? linear_attention : attention + gated_q;
    } else {  // gemma4: heads of the layer's size; a KV-sharing layer still holds its q, o and norms
      const int64_t lq = c.layer_q_dim(l), lkv = c.layer_kv_dim(l), hd = c.layer_head_dim(l);
      const bool own = c.kv_source_layer(l) == l;
      total += 2 * d + d * lq + lq * d + hd + 2 * d + (own ? 2 * d * lkv + hd : 0);
    }
    if (c.layer_kind(l).ffn == FfnKind::kMoe) total += shared;
    if (c.layer_kind(l).ffn == FfnKind::kMoe && c.moe.dense_beside_experts)  // MLP, 4 norms/scales, expert scales
      total += 3 * d * static_cast<int64_t>(c.layer_hidden_dim(l)) + 4 * d + c.moe.n_experts;
    total += c.layer_kind(l).ffn == FfnKind::kMoe
                 ? d * c.moe.n_experts + experts * 3 * d * static_cast<int64_t>(c.moe.expert_hidden_dim) +
                       (c.arch == "gpt-oss" ? c.moe.n_experts + experts * (2 * c.moe.expert_hidden_dim + d) : 0)
                 : 3 * d * static_cast<int64_t>(c.layer_hidden_dim(l));
    if (c.per_layer_dim > 0) total += 2 * d * c.per_layer_dim + d;  // inp_gate, proj, post_norm
    if (c.layer_output_scale) total += 1;
  }
  const int64_t emb = static_cast<int64_t>(c.vocab_size) * d;
  // Per-layer embeddings: the table [vocab, L x P], the projection [L x P, dim] and its norm [P].
  const int64_t per_layer = c.per_layer_dim > 0 ? static_cast<int64_t>(c.n_layers) * c.per_layer_dim *
                                                          (static_cast<int64_t>(c.vocab_size) + d) +
                                                      c.per_layer_dim
                                                : 0;
  return emb * (c.tied_embeddings ? 1 : 2) + total + d + per_layer;
}

}  // namespace

int64_t ModelConfig::parameter_count() const { return count_parameters(*this, false); }
int64_t ModelConfig::active_parameter_count() const { return count_parameters(*this, true); }

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
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta))
    return invalid_argument(fmt::format("rope_theta {} must be positive", rope_theta));
  if (!(norm_eps > 0.0f && norm_eps < 1.0f))
    return invalid_argument(fmt::format("norm_eps {} must be in (0, 1)", norm_eps));
  auto finite_nonneg = [](float v) { return std::isfinite(v) && v >= 0.0f; };
  if (!finite_nonneg(embedding_scale) || !finite_nonneg(attn_scale) || !finite_nonneg(attn_softcap) ||
      !finite_nonneg(final_softcap) || !finite_nonneg(rope_theta_sliding))
    return invalid_argument(
        "embedding scale, attention scale, soft-caps and rope_theta_sliding must be finite and >= 0");
  if (n_token_types < 0 || n_token_types > (1 << 16))
    return invalid_argument(fmt::format("n_token_types {} is out of range [0, 65536]", n_token_types));
  if (!causal && arch != "bert")
    return unimplemented(fmt::format("non-causal attention is implemented for bert, not {}", arch));
  if (sliding_window < 0 || sliding_pattern < 0)
    return invalid_argument(
        fmt::format("sliding_window {} / pattern {} must be >= 0", sliding_window, sliding_pattern));
  if (static_cast<int>(layer_kinds.size()) > n_layers)
    return invalid_argument(fmt::format("{} layer kinds for {} layers", layer_kinds.size(), n_layers));
  if (has_linear_layers()) {
    const LinearAttentionConfig& la = linear;
    if (!in_range(la.conv_kernel, 2, 64) || !in_range(la.k_heads, 1, 1024) || !in_range(la.v_heads, 1, 1024) ||
        !in_range(la.head_dim, 1, 1024))
      return invalid_argument(
          fmt::format("linear attention: conv kernel {} (2..64), key heads {}, value heads {}, "
                      "head size {} (1..1024) are out of range",
                      la.conv_kernel, la.k_heads, la.v_heads, la.head_dim));
    if (la.v_heads % la.k_heads != 0)
      return invalid_argument(
          fmt::format("linear attention: {} value heads are not a multiple of {} key heads", la.v_heads, la.k_heads));
  }
  if (head_dim_sliding != 0 && (!in_range(head_dim_sliding, 2, 1024) || head_dim_sliding % 2 != 0))
    return invalid_argument(fmt::format("sliding head_dim {} must be even and in [2, 1024]", head_dim_sliding));
  if (!layer_hidden_dims.empty()) {
    if (static_cast<int>(layer_hidden_dims.size()) != n_layers)
      return invalid_argument(fmt::format("{} feed-forward widths for {} layers", layer_hidden_dims.size(), n_layers));
    for (int v : layer_hidden_dims)
      if (!in_range(v, 1, 1 << 18)) return invalid_argument(fmt::format("hidden_dim {} is out of range", v));
  }
  if (!layer_kv_heads.empty()) {
    if (static_cast<int>(layer_kv_heads.size()) != n_layers)
      return invalid_argument(fmt::format("{} KV head counts for {} layers", layer_kv_heads.size(), n_layers));
    for (int h : layer_kv_heads)
      if (!in_range(h, 1, n_kv_heads) || n_heads % h != 0)
        return invalid_argument(
            fmt::format("{} KV heads in a layer do not divide {} heads (at most {})", h, n_heads, n_kv_heads));
  }
  if (per_layer_dim < 0 || per_layer_dim > (1 << 16))
    return invalid_argument(fmt::format("per-layer embedding width {} is out of range", per_layer_dim));
  if (shared_kv_layers != 0) {
    // llama.cpp's rule (its gemma4 KV cache): a sharing sliding layer reads layer n - shared - 2, a full one
    // n - shared - 1; those must be layers of the same kind, or the shapes would not match.
    const int first = n_layers - shared_kv_layers;
    if (shared_kv_layers < 0 || first < 2)
      return invalid_argument(
          fmt::format("{} KV-sharing layers of {} leave fewer than 2 with their own KV", shared_kv_layers, n_layers));
    for (int l = first; l < n_layers; ++l)
      if (is_sliding_layer(kv_source_layer(l)) != is_sliding_layer(l))
        return invalid_argument(
            fmt::format("KV-sharing layer {} would read layer {}, which is of the other kind", l, kv_source_layer(l)));
  }
  if (rope_dims < 0 || rope_dims > head_dim || rope_dims % 2 != 0)
    return invalid_argument(
        fmt::format("rope dimensions {} must be even and at most head_dim {}", rope_dims, head_dim));
  if (has_moe_layers() || moe.enabled()) {
    if (!has_moe_layers())
      return invalid_argument(fmt::format("{} experts are stated but no layer uses them", moe.n_experts));
    if (!in_range(moe.n_experts, 1, 4096))
      return invalid_argument(fmt::format("expert count {} is out of range [1, 4096]", moe.n_experts));
    if (!in_range(moe.n_experts_used, 1, moe.n_experts))
      return invalid_argument(
          fmt::format("experts used per token {} is out of range [1, {}]", moe.n_experts_used, moe.n_experts));
    if (!in_range(moe.expert_hidden_dim, 1, 1 << 18))
      return invalid_argument(
          fmt::format("expert feed-forward width {} is out of range [1, 262144]", moe.expert_hidden_dim));
    if (!(moe.weights_scale > 0.0f) || !std::isfinite(moe.weights_scale))
      return invalid_argument(fmt::format("expert weights scale {} must be positive", moe.weights_scale));
    if (!(moe.swiglu_limit >= 0.0f) || !std::isfinite(moe.swiglu_limit))
      return invalid_argument(fmt::format("swiglu limit {} must be >= 0", moe.swiglu_limit));
  }
  const RopeScaling& r = rope_scaling;
  if (r.type != RopeScalingType::kNone) {
    if (!(r.factor > 0.0f) || !std::isfinite(r.factor))
      return invalid_argument(fmt::format("rope scaling factor {} must be positive", r.factor));
    if (!(r.mscale > 0.0f) || !std::isfinite(r.mscale))
      return invalid_argument(fmt::format("rope scaling attention factor {} must be positive", r.mscale));
    const bool needs_orig =
        r.type == RopeScalingType::kLlama3 || r.type == RopeScalingType::kYarn || r.type == RopeScalingType::kLongrope;
    if (needs_orig && r.original_context <= 0)
      return invalid_argument(
          fmt::format("{} rope scaling needs the original context length", rope_scaling_name(r.type)));
    if (r.type == RopeScalingType::kLlama3 && !(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0.0f))
      return invalid_argument(fmt::format("llama3 rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                                          r.low_freq_factor, r.high_freq_factor));
    if (r.type == RopeScalingType::kYarn && !(r.beta_fast > r.beta_slow && r.beta_slow > 0.0f))
      return invalid_argument(
          fmt::format("yarn rope scaling needs 0 < beta_slow ({}) < beta_fast ({})", r.beta_slow, r.beta_fast));
  }
  return ok_status();
}

}  // namespace tessera::model
