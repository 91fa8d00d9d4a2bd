#include "model/formats/gguf/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/rope_scaling.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/weight_export.h"

namespace tessera::model {
namespace {

Result<int> get_dim(const GgufContents& c, const std::string& key) {
  TS_ASSIGN_OR_RETURN(int64_t v, c.get_int(key));
  if (v < 0 || v > (int64_t{1} << 30)) return invalid_argument(fmt::format("GGUF {} = {} is out of range", key, v));
  return static_cast<int>(v);
}

Result<int> get_dim_or(const GgufContents& c, const std::string& key, int fallback) {
  if (c.find(key) == nullptr) return fallback;
  return get_dim(c, key);
}

Result<float> get_float_or(const GgufContents& c, const std::string& key, float fallback) {
  if (c.find(key) == nullptr) return fallback;
  TS_ASSIGN_OR_RETURN(double v, c.get_float(key));
  if (!std::isfinite(v)) return invalid_argument(fmt::format("GGUF {} = {} is not finite", key, v));
  return static_cast<float>(v);
}

// A key llama.cpp reads with get_key_or_arr: one value, or one per layer. Arrays are accepted only where `per_layer`
// is given (which then holds them); a scalar leaves it empty.
Result<int> get_dim_or_layers(const GgufContents& c, const std::string& key, int n_layers,
                              std::vector<int>* per_layer) {
  const GgufValue* v = c.find(key);
  if (v == nullptr || v->type != GgufType::kArray) return get_dim(c, key);
  if (per_layer == nullptr)
    return unimplemented(fmt::format("GGUF {} holds one value per layer, which is not supported here", key));
  if (v->ints.size() != static_cast<size_t>(n_layers))
    return invalid_argument(fmt::format("GGUF {} holds {} values for {} layers", key, v->ints.size(), n_layers));
  per_layer->clear();
  for (int64_t x : v->ints) {
    if (x < 0 || x > (int64_t{1} << 30)) return invalid_argument(fmt::format("GGUF {} holds {}", key, x));
    per_layer->push_back(static_cast<int>(x));
  }
  return per_layer->front();
}

// Gemma 4's keys (llama.cpp's gemma4 loader): the sliding layers as a per-layer bool array, which Tessera holds as a
// period; their head size and rotary base; the KV-sharing layers; the per-layer embeddings' width; the soft-cap.
Status read_gemma4_keys(const GgufContents& c, ModelConfig& cfg) {
  const std::string a = cfg.arch + ".";
  TS_ASSIGN_OR_RETURN(cfg.sliding_window, get_dim(c, a + "attention.sliding_window"));
  TS_ASSIGN_OR_RETURN(cfg.final_softcap, get_float_or(c, a + "final_logit_softcapping", 0.0f));
  TS_ASSIGN_OR_RETURN(cfg.rope_theta_sliding, get_float_or(c, a + "rope.freq_base_swa", cfg.rope_theta));
  TS_ASSIGN_OR_RETURN(cfg.head_dim_sliding, get_dim(c, a + "attention.key_length_swa"));
  TS_ASSIGN_OR_RETURN(int v_swa, get_dim_or(c, a + "attention.value_length_swa", cfg.head_dim_sliding));
  TS_ASSIGN_OR_RETURN(int rope_swa, get_dim_or(c, a + "rope.dimension_count_swa", cfg.head_dim_sliding));
  if (v_swa != cfg.head_dim_sliding || rope_swa != cfg.head_dim_sliding)
    return unimplemented(fmt::format("gemma4 sliding layers with value heads of {} or rotary over {} of {} dimensions",
                                     v_swa, rope_swa, cfg.head_dim_sliding));
  TS_ASSIGN_OR_RETURN(cfg.shared_kv_layers, get_dim_or(c, a + "attention.shared_kv_layers", 0));
  TS_ASSIGN_OR_RETURN(cfg.per_layer_dim, get_dim(c, a + "embedding_length_per_layer_input"));
  const GgufValue* pattern = c.find(a + "attention.sliding_window_pattern");
  if (pattern == nullptr || pattern->type != GgufType::kArray ||
      pattern->ints.size() != static_cast<size_t>(cfg.n_layers))
    return invalid_argument(fmt::format("GGUF {}attention.sliding_window_pattern needs one bool per layer", a));
  // Tessera's sliding layers repeat with a period whose last layer attends fully: find it, or refuse the layout.
  cfg.sliding_pattern = 0;
  for (int period = 1; period <= cfg.n_layers + 1 && cfg.sliding_pattern == 0; ++period) {
    cfg.sliding_pattern = period;
    for (int l = 0; l < cfg.n_layers; ++l)
      if ((pattern->ints[static_cast<size_t>(l)] != 0) != cfg.is_sliding_layer(l)) cfg.sliding_pattern = 0;
  }
  if (cfg.sliding_pattern == 0)
    return unimplemented(
        fmt::format("GGUF {}attention.sliding_window_pattern is not a repeating run of sliding "
                    "layers closed by one full layer",
                    a));
  return ok_status();
}

// Soft-capping, sliding windows, the attention scale and Gemma 3's second rotary base, with llama.cpp's
// defaults where its converter leaves a key out.
Status read_family_keys(const GgufContents& c, ModelConfig& cfg) {
  const std::string& a = cfg.arch;
  if (a == "gemma2") {
    TS_ASSIGN_OR_RETURN(cfg.attn_softcap, get_float_or(c, a + ".attn_logit_softcapping", 50.0f));
    TS_ASSIGN_OR_RETURN(cfg.final_softcap, get_float_or(c, a + ".final_logit_softcapping", 30.0f));
    TS_ASSIGN_OR_RETURN(cfg.sliding_window, get_dim_or(c, a + ".attention.sliding_window", 4096));
  } else if (a == "gemma3") {
    TS_ASSIGN_OR_RETURN(cfg.final_softcap, get_float_or(c, a + ".final_logit_softcapping", 0.0f));
    TS_ASSIGN_OR_RETURN(cfg.sliding_window, get_dim_or(c, a + ".attention.sliding_window", 0));
    TS_ASSIGN_OR_RETURN(cfg.rope_theta_sliding, get_float_or(c, a + ".rope.freq_base_swa", 10000.0f));
  } else if (a == "phi3" || a == "llama" || a == "qwen2" || a == "qwen3" || a == "qwen3moe") {
    TS_ASSIGN_OR_RETURN(cfg.sliding_window, get_dim_or(c, a + ".attention.sliding_window", 0));
  } else if (a == "gpt-oss") {
    TS_ASSIGN_OR_RETURN(cfg.sliding_window, get_dim(c, a + ".attention.sliding_window"));  // llama.cpp needs it
    if (c.find(a + ".rope.freq_base_swa")) {
      TS_ASSIGN_OR_RETURN(float swa_base, get_float_or(c, a + ".rope.freq_base_swa", cfg.rope_theta));
      if (swa_base != cfg.rope_theta)
        return unimplemented(
            fmt::format("GGUF {}.rope.freq_base_swa {} differs from rope.freq_base {}", a, swa_base, cfg.rope_theta));
    }
  }
  if (a == "gemma4") return read_gemma4_keys(c, cfg);
  if (cfg.sliding_window > 0 && c.find(a + ".attention.sliding_window_pattern")) {
    const GgufValue* v = c.find(a + ".attention.sliding_window_pattern");
    if (v->type == GgufType::kArray)
      return unimplemented("a per-layer attention.sliding_window_pattern array is not supported");
    TS_ASSIGN_OR_RETURN(cfg.sliding_pattern, get_dim(c, a + ".attention.sliding_window_pattern"));
  }
  if (a == "gemma2" || a == "gemma3") {
    // llama.cpp's rule (gemma_pytorch's config): the 27B models scale by 1/sqrt(dim / heads), the others by
    // 1/sqrt(head_dim); the GGUF files do not carry query_pre_attn_scalar.
    const bool is_27b = (a == "gemma2" && cfg.n_layers == 46) || (a == "gemma3" && cfg.n_layers == 62);
    const float scalar = is_27b ? static_cast<float>(cfg.dim / cfg.n_heads) : static_cast<float>(cfg.head_dim);
    cfg.attn_scale = 1.0f / std::sqrt(scalar);
  }
  return ok_status();
}

// Mixture-of-experts keys (llama.cpp's LLM_KV_EXPERT_*). A llama file with experts is a Mixtral; qwen3moe has
// them always. What these families do not have (shared experts, expert groups, leading dense layers, another
// gating function) is refused by name rather than ignored.
Status read_moe_keys(const GgufContents& c, ModelConfig& cfg) {
  const std::string& a = cfg.arch;
  TS_ASSIGN_OR_RETURN(int experts, get_dim_or(c, a + ".expert_count", 0));
  if (experts == 0) {
    if (a == "qwen3moe" || a == "gpt-oss" || a == "qwen35moe")
      return invalid_argument(fmt::format("GGUF {} needs {}.expert_count > 0", a, a));
    return ok_status();
  }
  if (a != "qwen3moe" && a != "llama" && a != "gpt-oss" && a != "qwen35moe" && a != "gemma4")
    return unimplemented(
        fmt::format("GGUF {}.expert_count {}: mixture-of-experts {} models are not supported", a, experts, a));
  MoeConfig& m = cfg.moe;
  m.n_experts = experts;
  TS_ASSIGN_OR_RETURN(m.n_experts_used, get_dim(c, a + ".expert_used_count"));
  if (a == "qwen35moe") {
    // llama.cpp's qwen35moe always has its gated shared expert, feed_forward_length wide unless stated.
    TS_ASSIGN_OR_RETURN(m.shared_expert_hidden_dim,
                        get_dim_or(c, a + ".expert_shared_feed_forward_length", cfg.hidden_dim));
  }
  for (const char* key : {"expert_shared_count", "expert_shared_feed_forward_length", "expert_group_count",
                          "expert_group_used_count", "leading_dense_block_count", "expert_chunk_feed_forward_length"}) {
    if (c.find(a + "." + key) == nullptr) continue;
    TS_ASSIGN_OR_RETURN(int v, get_dim(c, a + "." + key));
    const bool harmless = (std::string_view(key) == "expert_group_count" && v <= 1) || v == 0 ||
                          (a == "qwen35moe" && std::string_view(key) == "expert_shared_feed_forward_length");
    if (!harmless)
      return unimplemented(
          fmt::format("GGUF {}.{} = {} is not supported (no shared experts, expert groups or dense "
                      "leading layers in Tessera's {})",
                      a, key, v, a));
  }
  if (a == "llama") {
    // llama.cpp's llama arch runs its experts at feed_forward_length (Mixtral's intermediate_size).
    m.expert_hidden_dim = cfg.hidden_dim;
    TS_ASSIGN_OR_RETURN(int eff, get_dim_or(c, a + ".expert_feed_forward_length", cfg.hidden_dim));
    if (eff != cfg.hidden_dim)
      return unimplemented(fmt::format("GGUF llama.expert_feed_forward_length {} differs from feed_forward_length {}",
                                       eff, cfg.hidden_dim));
  } else if (a == "gpt-oss" || a == "gemma4") {
    TS_ASSIGN_OR_RETURN(m.expert_hidden_dim, get_dim(c, a + ".expert_feed_forward_length"));
  } else {
    TS_ASSIGN_OR_RETURN(m.expert_hidden_dim, get_dim_or(c, a + ".expert_feed_forward_length",
                                                        m.n_experts_used > 0 ? cfg.hidden_dim / m.n_experts_used : 0));
  }
  if (c.find(a + ".expert_gating_func")) {
    TS_ASSIGN_OR_RETURN(int64_t g, c.get_int(a + ".expert_gating_func"));
    const ExpertGating want = g == 1   ? ExpertGating::kSoftmax
                              : g == 2 ? ExpertGating::kSigmoid
                              : g == 3 ? ExpertGating::kSoftmaxWeight
                                       : m.gating;
    if ((g < 1 || g > 3) || want != m.gating)
      return unimplemented(fmt::format("GGUF {}.expert_gating_func {} is not supported for {} (it routes by {})", a, g,
                                       a, expert_gating_name(m.gating)));
  }
  if (c.find(a + ".expert_weights_norm")) {
    TS_ASSIGN_OR_RETURN(int64_t v, c.get_int(a + ".expert_weights_norm"));
    m.normalize_weights = v != 0;
  }
  TS_ASSIGN_OR_RETURN(float scale, get_float_or(c, a + ".expert_weights_scale", 0.0f));
  m.weights_scale = scale == 0.0f ? 1.0f : scale;        // llama.cpp: 0 (absent) and 1 both mean no scaling
  if (a != "qwen35moe") cfg.set_all_ffn(FfnKind::kMoe);  // qwen35moe's kinds come with its attention kinds
  return ok_status();
}

// Qwen3.5's hybrid layout (llama.cpp's qwen35 / qwen35moe loaders): the ssm.* shape of the linear layers, which layers
// are recurrent (attention.recurrent_layers, else every layer but each full_attention_interval-th), the M-RoPE
// sections, and the multi-token-prediction blocks counted in block_count but not run (nextn_predict_layers).
Status read_linear_keys(const GgufContents& c, ModelConfig& cfg) {
  const std::string& a = cfg.arch;
  LinearAttentionConfig& la = cfg.linear;
  TS_ASSIGN_OR_RETURN(la.conv_kernel, get_dim(c, a + ".ssm.conv_kernel"));
  TS_ASSIGN_OR_RETURN(la.head_dim, get_dim(c, a + ".ssm.state_size"));
  TS_ASSIGN_OR_RETURN(la.k_heads, get_dim(c, a + ".ssm.group_count"));
  TS_ASSIGN_OR_RETURN(la.v_heads, get_dim(c, a + ".ssm.time_step_rank"));
  TS_ASSIGN_OR_RETURN(int inner, get_dim(c, a + ".ssm.inner_size"));
  if (inner != la.v_heads * la.head_dim)
    return unimplemented(
        fmt::format("GGUF {}.ssm.inner_size {} differs from time_step_rank {} x state_size {} (value "
                    "heads of another size than key heads)",
                    a, inner, la.v_heads, la.head_dim));
  TS_ASSIGN_OR_RETURN(int nextn, get_dim_or(c, a + ".nextn_predict_layers", 0));
  if (nextn >= cfg.n_layers)
    return invalid_argument(fmt::format("GGUF {}.nextn_predict_layers {} leaves no layers", a, nextn));
  cfg.n_layers -= nextn;  // the MTP draft blocks follow the trunk; the main pass never runs them
  const GgufValue* sections = c.find(a + ".rope.dimension_sections");
  if (sections == nullptr) return invalid_argument(fmt::format("GGUF {} needs {}.rope.dimension_sections", a, a));
  if (sections->type != GgufType::kArray || sections->ints.size() != 4)
    return invalid_argument(fmt::format("GGUF {}.rope.dimension_sections must be an array of 4 integers", a));
  cfg.rope_sections.clear();
  for (int64_t v : sections->ints) {
    if (v < 0 || v > 1024) return invalid_argument(fmt::format("GGUF {}.rope.dimension_sections holds {}", a, v));
    cfg.rope_sections.push_back(static_cast<int>(v));
  }
  std::vector<bool> recurrent(static_cast<size_t>(cfg.n_layers));
  if (const GgufValue* v = c.find(a + ".attention.recurrent_layers")) {
    if (v->type != GgufType::kArray || v->ints.size() < static_cast<size_t>(cfg.n_layers))
      return invalid_argument(fmt::format("GGUF {}.attention.recurrent_layers needs one value per layer", a));
    for (int l = 0; l < cfg.n_layers; ++l) recurrent[static_cast<size_t>(l)] = v->ints[static_cast<size_t>(l)] != 0;
  } else {
    TS_ASSIGN_OR_RETURN(int interval, get_dim_or(c, a + ".full_attention_interval", 4));
    if (interval < 1) return invalid_argument(fmt::format("GGUF {}.full_attention_interval must be positive", a));
    for (int l = 0; l < cfg.n_layers; ++l) recurrent[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
  const FfnKind ffn = a == "qwen35moe" ? FfnKind::kMoe : FfnKind::kDense;
  cfg.layer_kinds.clear();
  for (int l = 0; l < cfg.n_layers; ++l)
    cfg.layer_kinds.push_back({recurrent[static_cast<size_t>(l)] ? AttentionKind::kLinear : AttentionKind::kFull, ffn});
  cfg.compact_layer_kinds();
  return ok_status();
}

Status read_rope_scaling(const GgufContents& c, ModelConfig& cfg) {
  const std::string k = cfg.arch + ".rope.scaling.";
  RopeScaling& r = cfg.rope_scaling;
  std::string type = "none";
  if (c.find(k + "type")) {
    TS_ASSIGN_OR_RETURN(type, c.get_string(k + "type"));
  } else if (cfg.arch == "phi3" && c.find(k + "original_context_length")) {
    type = "longrope";  // llama.cpp's phi3 converter writes the factor tensors and these keys, not the type
  }
  TS_ASSIGN_OR_RETURN(float factor, get_float_or(c, k + "factor", 1.0f));
  TS_ASSIGN_OR_RETURN(r.original_context, get_dim_or(c, k + "original_context_length", 0));
  TS_ASSIGN_OR_RETURN(float attn_factor, get_float_or(c, k + "attn_factor", 1.0f));
  for (const char* unsupported : {"yarn_ext_factor", "yarn_log_multiplier", "alpha"}) {
    if (c.find(k + unsupported))
      return unimplemented(fmt::format("GGUF {}{} is not supported (only plain yarn is)", k, unsupported));
  }
  if (type == "none") return ok_status();
  r.factor = factor;
  if (type == "linear") {
    r.type = RopeScalingType::kLinear;
  } else if (type == "yarn") {
    r.type = RopeScalingType::kYarn;
    TS_ASSIGN_OR_RETURN(r.beta_fast, get_float_or(c, k + "yarn_beta_fast", 32.0f));
    TS_ASSIGN_OR_RETURN(r.beta_slow, get_float_or(c, k + "yarn_beta_slow", 1.0f));
    // llama.cpp multiplies the stated attention factor by YaRN's 1 + 0.1 ln(factor).
    r.mscale = attn_factor * (1.0f + 0.1f * std::log(factor));
  } else if (type == "longrope") {
    r.type = RopeScalingType::kLongrope;
    r.mscale = attn_factor;
  } else {
    return unimplemented(fmt::format("GGUF {}type '{}' is not supported (none, linear, yarn, longrope are)", k, type));
  }
  return ok_status();
}

// Phi-3 files fuse Q, K and V into attn_qkv and the gate and up projections into one ffn_up of twice the
// feed-forward width (gate first); the engine reads them as separate row ranges of the same bytes.
Status split_fused_tensors(const ModelConfig& cfg, ModelWeights& w) {
  for (int l = 0; l < cfg.n_layers; ++l) {
    const WeightTensor* qkv = w.find(layer_tensor_name(l, "attn_qkv.weight"));
    if (qkv && cfg.layer_kind(l).attention == AttentionKind::kFull) {  // a linear layer's attn_qkv is its own
      TS_ASSIGN_OR_RETURN(auto parts,
                          split_rows(*qkv,
                                     {layer_tensor_name(l, "attn_q.weight"), layer_tensor_name(l, "attn_k.weight"),
                                      layer_tensor_name(l, "attn_v.weight")},
                                     {cfg.q_dim(), cfg.kv_dim(), cfg.kv_dim()}));
      for (WeightTensor& t : parts) w.add(std::move(t));
    }
    const WeightTensor* up = w.find(layer_tensor_name(l, "ffn_up.weight"));
    if (up && w.find(layer_tensor_name(l, "ffn_gate.weight")) == nullptr && !up->shape.empty() &&
        up->shape[0] == 2 * static_cast<int64_t>(cfg.hidden_dim)) {
      TS_ASSIGN_OR_RETURN(
          auto parts, split_rows(*up, {layer_tensor_name(l, "ffn_gate.weight"), layer_tensor_name(l, "ffn_up.weight")},
                                 {cfg.hidden_dim, cfg.hidden_dim}));
      w.replace(std::move(parts[1]));
      w.add(std::move(parts[0]));
    }
  }
  return ok_status();
}

}  // namespace

bool looks_like_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Result<GgufModel> load_gguf_model(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  return parse_gguf_model(file->bytes(), path, file);
}

Result<GgufModel> parse_gguf_model(std::span<const uint8_t> bytes, const std::string& name,
                                   std::shared_ptr<const void> keep_alive) {
  TS_ASSIGN_OR_RETURN(GgufContents c, parse_gguf(bytes, name));
  GgufModel m;
  auto ctx = [&](const Status& s) { return s.with_context(name); };
  auto arch = c.get_string("general.architecture");
  if (!arch.ok()) return ctx(arch.status());
  ModelConfig& cfg = m.config;
  cfg.arch = *arch;
  if (Status s = apply_arch_features(cfg); !s.ok()) return ctx(unimplemented("GGUF " + s.message()));
  const std::string& a = *arch;
  Status st = [&]() -> Status {
    TS_ASSIGN_OR_RETURN(cfg.dim, get_dim(c, a + ".embedding_length"));
    TS_ASSIGN_OR_RETURN(cfg.n_layers, get_dim(c, a + ".block_count"));
    const bool gemma4 = a == "gemma4";
    TS_ASSIGN_OR_RETURN(cfg.hidden_dim, get_dim_or_layers(c, a + ".feed_forward_length", cfg.n_layers,
                                                          gemma4 ? &cfg.layer_hidden_dims : nullptr));
    // Every layer has tensors of its own: a larger count is a damaged header, and refusing it here keeps the
    // per-layer loops below from walking a billion layers.
    if (static_cast<size_t>(cfg.n_layers) > c.tensors.size())
      return invalid_argument(
          fmt::format("block_count {} exceeds the {} tensors in the file", cfg.n_layers, c.tensors.size()));
    TS_ASSIGN_OR_RETURN(cfg.n_heads, get_dim(c, a + ".attention.head_count"));
    if (const GgufValue* kvh = c.find(a + ".attention.head_count_kv"); kvh && kvh->type == GgufType::kArray) {
      std::vector<int> per_layer;
      TS_ASSIGN_OR_RETURN(cfg.n_kv_heads, get_dim_or_layers(c, a + ".attention.head_count_kv", cfg.n_layers,
                                                            gemma4 ? &per_layer : nullptr));
      // gemma4 (26B-A4B): KV heads per layer; n_kv_heads is the largest count.
      if (std::adjacent_find(per_layer.begin(), per_layer.end(), std::not_equal_to<>()) != per_layer.end()) {
        cfg.n_kv_heads = *std::max_element(per_layer.begin(), per_layer.end());
        cfg.layer_kv_heads = per_layer;
      }
    } else {
      TS_ASSIGN_OR_RETURN(cfg.n_kv_heads, get_dim_or(c, a + ".attention.head_count_kv", cfg.n_heads));
    }
    TS_ASSIGN_OR_RETURN(cfg.max_seq_len, get_dim(c, a + ".context_length"));
    if (cfg.n_heads <= 0) return invalid_argument("attention.head_count must be positive");
    TS_ASSIGN_OR_RETURN(cfg.head_dim, get_dim_or(c, a + ".attention.key_length", cfg.dim / cfg.n_heads));
    TS_ASSIGN_OR_RETURN(int v_dim, get_dim_or(c, a + ".attention.value_length", cfg.head_dim));
    if (v_dim != cfg.head_dim)
      return unimplemented(
          fmt::format("value heads of {} dimensions differ from key heads of {}", v_dim, cfg.head_dim));
    TS_ASSIGN_OR_RETURN(int rope_dims, get_dim_or(c, a + ".rope.dimension_count", cfg.head_dim));
    const bool qwen35 = a == "qwen35" || a == "qwen35moe";
    if (rope_dims != cfg.head_dim && !qwen35)
      return unimplemented(fmt::format("partial rotary embedding ({} of {} dimensions) is not supported for {}",
                                       rope_dims, cfg.head_dim, a));
    if (rope_dims != cfg.head_dim) cfg.rope_dims = rope_dims;
    if (c.find(a + ".rope.freq_base")) {
      TS_ASSIGN_OR_RETURN(double theta, c.get_float(a + ".rope.freq_base"));
      cfg.rope_theta = static_cast<float>(theta);
    }
    if (c.find(a + ".attention.layer_norm_rms_epsilon")) {
      TS_ASSIGN_OR_RETURN(double eps, c.get_float(a + ".attention.layer_norm_rms_epsilon"));
      cfg.norm_eps = static_cast<float>(eps);
    }
    if (a == "bert") {  // LayerNorm, not RMSNorm: its own key, required as llama.cpp requires it
      TS_ASSIGN_OR_RETURN(double eps, c.get_float(a + ".attention.layer_norm_epsilon"));
      cfg.norm_eps = static_cast<float>(eps);
      TS_ASSIGN_OR_RETURN(cfg.n_token_types, get_dim_or(c, "tokenizer.ggml.token_type_count", 0));
    }
    if (c.find(a + ".attention.causal")) {
      TS_ASSIGN_OR_RETURN(int64_t causal, c.get_int(a + ".attention.causal"));
      if ((causal != 0) != cfg.causal)
        return unimplemented(fmt::format("{}.attention.causal = {} is not supported for {} (only {})", a,
                                         causal != 0 ? "true" : "false", a, cfg.causal ? "causal" : "non-causal"));
    }
    if (c.find(a + ".pooling_type")) {
      TS_ASSIGN_OR_RETURN(int64_t pooling, c.get_int(a + ".pooling_type"));
      TS_ASSIGN_OR_RETURN(m.pooling, pooling_from_gguf(pooling));
    }
    if (cfg.post_norms) cfg.embedding_scale = std::sqrt(static_cast<float>(cfg.dim));  // Gemma
    TS_RETURN_IF_ERROR(read_family_keys(c, cfg));
    if (qwen35) TS_RETURN_IF_ERROR(read_linear_keys(c, cfg));
    TS_RETURN_IF_ERROR(read_moe_keys(c, cfg));
    return read_rope_scaling(c, cfg);
  }();
  if (!st.ok()) return ctx(st);
  m.weights = ModelWeights(std::move(keep_alive));
  for (const GgufTensor& t : c.tensors) {
    std::string tname = t.name;
    // gpt-oss files name the norm before the experts post_attention_norm (llama.cpp's ATTN_POST_NORM); the engine
    // calls every pre-FFN norm ffn_norm.
    if ((cfg.arch == "gpt-oss" || cfg.arch == "qwen35" || cfg.arch == "qwen35moe") &&
        tname.ends_with(".post_attention_norm.weight"))
      tname = tname.substr(0, tname.size() - std::string_view("post_attention_norm.weight").size()) + "ffn_norm.weight";
    m.weights.add({tname, t.dtype, t.shape(), t.data, t.bytes});
  }
  if (Status s = split_fused_tensors(cfg, m.weights); !s.ok()) return ctx(s);
  if (cfg.rope_scaling.type == RopeScalingType::kNone && m.weights.find("rope_factors_long.weight") != nullptr)
    return ctx(invalid_argument("rope_factors_long.weight is present but the rope.scaling keys are missing"));
  const WeightTensor* emb = m.weights.find("token_embd.weight");
  if (!emb || emb->shape.size() != 2) return invalid_argument(fmt::format("{}: no 2-D token_embd.weight", name));
  cfg.vocab_size = static_cast<int>(emb->shape[0]);
  cfg.tied_embeddings = m.weights.find("output.weight") == nullptr;
  if (const WeightTensor* types = m.weights.find("token_types.weight");
      cfg.arch == "bert" && cfg.n_token_types == 0 && types && types->shape.size() == 2)
    cfg.n_token_types = static_cast<int>(types->shape[0]);
  if (Status s = cfg.validate(); !s.ok()) return ctx(s);
  if (c.find("general.name")) {
    auto n = c.get_string("general.name");
    if (n.ok()) m.name = *n;
  }
  if (auto g = read_gguf_sampling(c); g.ok()) {
    m.generation = std::move(*g);
  } else {
    return ctx(g.status());
  }
  if (c.find("tokenizer.chat_template")) {
    auto t = c.get_string("tokenizer.chat_template");
    if (t.ok()) m.chat_template = *t;
  }
  if (c.find("tokenizer.chat_template.tool_use")) {  // llama.cpp's name for a named "tool_use" template
    auto t = c.get_string("tokenizer.chat_template.tool_use");
    if (t.ok()) m.chat_template_tool_use = *t;
  }
  if (c.find("tokenizer.ggml.model")) {
    auto v = read_gguf_vocab(c);
    if (!v.ok()) return ctx(v.status());
    if (static_cast<int>(v->tokens.size()) != cfg.vocab_size)
      return invalid_argument(fmt::format("{}: the embedded tokenizer has {} tokens but token_embd has {} rows", name,
                                          v->tokens.size(), cfg.vocab_size));
    auto tok = make_tokenizer(*v);
    if (!tok.ok()) return ctx(tok.status());
    m.tokenizer = std::move(*tok);
    m.vocab = std::move(*v);
  }
  return m;
}

namespace {

// Qwen3.5's keys as llama.cpp's converter writes them: ssm.*, full_attention_interval (or, when the layers do not
// follow one interval, attention.recurrent_layers) and the M-RoPE sections.
Status write_linear_keys(const ModelConfig& config, std::vector<std::pair<std::string, GgufValue>>& kv) {
  const std::string& a = config.arch;
  const LinearAttentionConfig& la = config.linear;
  auto u32 = [](int v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  kv.emplace_back(a + ".ssm.conv_kernel", u32(la.conv_kernel));
  kv.emplace_back(a + ".ssm.state_size", u32(la.head_dim));
  kv.emplace_back(a + ".ssm.group_count", u32(la.k_heads));
  kv.emplace_back(a + ".ssm.time_step_rank", u32(la.v_heads));
  kv.emplace_back(a + ".ssm.inner_size", u32(la.value_dim()));
  int interval = 0;
  for (int cand = 1; cand <= config.n_layers && interval == 0; ++cand) {
    bool fits = true;
    for (int l = 0; l < config.n_layers; ++l)
      fits = fits && (config.layer_kind(l).attention == AttentionKind::kLinear) == ((l + 1) % cand != 0);
    if (fits) interval = cand;
  }
  if (interval > 0) {
    kv.emplace_back(a + ".full_attention_interval", u32(interval));
  } else {
    std::vector<int32_t> flags;
    for (int l = 0; l < config.n_layers; ++l)
      flags.push_back(config.layer_kind(l).attention == AttentionKind::kLinear ? 1 : 0);
    kv.emplace_back(a + ".attention.recurrent_layers", GgufValue::i32_array(flags));
  }
  std::vector<int32_t> sections(config.rope_sections.begin(), config.rope_sections.end());
  if (sections.size() != 4) return invalid_argument(fmt::format("a {} model needs 4 M-RoPE sections", a));
  kv.emplace_back(a + ".rope.dimension_sections", GgufValue::i32_array(sections));
  return ok_status();
}

// Gemma 4's keys as llama.cpp's converter writes them (what read_gemma4_keys reads): each kind of layer's head size
// and rotary base, the sliding layers as one bool per layer, the KV-sharing layers, the per-layer embeddings' width,
// and arrays for the MLP widths and KV head counts where layers differ.
void write_gemma4_keys(const ModelConfig& c, std::vector<std::pair<std::string, GgufValue>>& kv) {
  const std::string a = c.arch + ".";
  auto u32 = [](int v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  auto per_layer = [&](auto value) {
    GgufValue g;
    g.type = GgufType::kArray;
    g.elem_type = GgufType::kUint32;
    for (int l = 0; l < c.n_layers; ++l) g.ints.push_back(value(l));
    return g;
  };
  if (!c.layer_hidden_dims.empty())
    kv.emplace_back(a + "feed_forward_length", per_layer([&](int l) { return c.layer_hidden_dim(l); }));
  if (!c.layer_kv_heads.empty())
    kv.emplace_back(a + "attention.head_count_kv", per_layer([&](int l) { return c.layer_n_kv_heads(l); }));
  const int swa = c.head_dim_sliding > 0 ? c.head_dim_sliding : c.head_dim;
  kv.emplace_back(a + "attention.key_length_swa", u32(swa));
  kv.emplace_back(a + "attention.value_length_swa", u32(swa));
  kv.emplace_back(a + "rope.dimension_count_swa", u32(swa));
  kv.emplace_back(a + "rope.freq_base_swa",
                  GgufValue::f32(c.rope_theta_sliding > 0.0f ? c.rope_theta_sliding : c.rope_theta));
  kv.emplace_back(a + "final_logit_softcapping", GgufValue::f32(c.final_softcap));
  GgufValue pattern = per_layer([&](int l) { return c.is_sliding_layer(l) ? 1 : 0; });
  pattern.elem_type = GgufType::kBool;
  kv.emplace_back(a + "attention.sliding_window_pattern", std::move(pattern));
  kv.emplace_back(a + "attention.shared_kv_layers", u32(c.shared_kv_layers));
  kv.emplace_back(a + "embedding_length_per_layer_input", u32(c.per_layer_dim));
}

// Phi-3's fused layout, as llama.cpp's converter writes it: attn_qkv = [q; k; v] and ffn_up = [gate; up].
Status fuse_phi3(const ModelConfig& c, ExportedWeights& ex) {
  for (int l = 0; l < c.n_layers; ++l) {
    auto n = [l](const char* s) { return layer_tensor_name(l, s); };
    TS_RETURN_IF_ERROR(
        fuse_rows(ex, {n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight")}, n("attn_qkv.weight")));
    TS_RETURN_IF_ERROR(fuse_rows(ex, {n("ffn_gate.weight"), n("ffn_up.weight")}, n("ffn_up.weight")));
  }
  return ok_status();
}

}  // namespace

Status write_gguf_model(const std::string& path, const ModelConfig& config, const ModelWeights& weights,
                        const Vocab* vocab, const GgufWriteOptions& options) {
  ModelConfig probe = config;
  TS_RETURN_IF_ERROR(apply_arch_features(probe));
  const bool has_bias = weights.find("blk.0.attn_q.bias") != nullptr;
  const bool bert = config.arch == "bert";
  if (config.arch != "qwen2" && config.arch != "gpt-oss" && !bert && has_bias)
    return invalid_argument(fmt::format("a {} model has no q/k/v biases; write it as qwen2", config.arch));
  const RopeScaling& rs = config.rope_scaling;
  // Llama 3.1's scaling travels as the tensor of frequency divisors llama.cpp reads.
  ModelWeights w = weights;
  std::vector<float> llama3_factors;
  if (rs.type == RopeScalingType::kLlama3 && w.find("rope_freqs.weight") == nullptr) {
    llama3_factors = llama3_freq_factors(config);
    w.add({"rope_freqs.weight",
           DType::kF32,
           {static_cast<int64_t>(llama3_factors.size())},
           reinterpret_cast<const uint8_t*>(llama3_factors.data()),
           llama3_factors.size() * sizeof(float)});
  }
  if (rs.type == RopeScalingType::kLongrope &&
      (w.find("rope_factors_long.weight") == nullptr || w.find("rope_factors_short.weight") == nullptr))
    return invalid_argument("longrope scaling needs rope_factors_long.weight and rope_factors_short.weight");
  RopeLayout layout = probe.rope_layout;
  TS_ASSIGN_OR_RETURN(ExportedWeights ex, export_weights(config, w, layout, options.matrix_dtype,
                                                         {all_dtypes().begin(), all_dtypes().end()}));
  if (options.notes) options.notes->insert(options.notes->end(), ex.notes.begin(), ex.notes.end());
  if (config.arch == "phi3") TS_RETURN_IF_ERROR(fuse_phi3(config, ex));
  if (config.arch == "gpt-oss" || config.arch == "qwen35" || config.arch == "qwen35moe") {
    for (WeightTensor& t : ex.tensors)
      if (t.name.ends_with(".ffn_norm.weight"))
        t.name =
            t.name.substr(0, t.name.size() - std::string_view("ffn_norm.weight").size()) + "post_attention_norm.weight";
  }

  const std::string& a = config.arch;
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", GgufValue::str(a));
  if (!options.name.empty()) kv.emplace_back("general.name", GgufValue::str(options.name));
  kv.emplace_back("general.alignment", GgufValue::u32(32));
  kv.emplace_back(a + ".context_length", GgufValue::u32(static_cast<uint32_t>(config.max_seq_len)));
  kv.emplace_back(a + ".embedding_length", GgufValue::u32(static_cast<uint32_t>(config.dim)));
  kv.emplace_back(a + ".block_count", GgufValue::u32(static_cast<uint32_t>(config.n_layers)));
  const bool gemma4 = a == "gemma4";  // its per-layer keys: write_gemma4_keys
  if (!gemma4 || config.layer_hidden_dims.empty())
    kv.emplace_back(a + ".feed_forward_length", GgufValue::u32(static_cast<uint32_t>(config.hidden_dim)));
  kv.emplace_back(a + ".attention.head_count", GgufValue::u32(static_cast<uint32_t>(config.n_heads)));
  if (bert) {  // what llama.cpp's converter writes for BertModel: no rotary keys, LayerNorm's epsilon
    kv.emplace_back(a + ".attention.layer_norm_epsilon", GgufValue::f32(config.norm_eps));
    kv.emplace_back(a + ".attention.causal", GgufValue::boolean(false));
    kv.emplace_back("tokenizer.ggml.token_type_count", GgufValue::u32(static_cast<uint32_t>(config.n_token_types)));
  }
  if (options.pooling != PoolingType::kNone)
    kv.emplace_back(a + ".pooling_type", GgufValue::u32(static_cast<uint32_t>(options.pooling)));
  if (!bert && !(gemma4 && !config.layer_kv_heads.empty()))
    kv.emplace_back(a + ".attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(config.n_kv_heads)));
  const bool qwen35 = a == "qwen35" || a == "qwen35moe";
  if (config.head_dim * config.n_heads != config.dim || a == "gemma2" || a == "gemma3" || qwen35 || gemma4) {
    kv.emplace_back(a + ".attention.key_length", GgufValue::u32(static_cast<uint32_t>(config.head_dim)));
    kv.emplace_back(a + ".attention.value_length", GgufValue::u32(static_cast<uint32_t>(config.head_dim)));
  }
  if (!bert) {
    if (config.rope_dims > 0 && !qwen35)
      return unimplemented(fmt::format("GGUF {} files cannot state partial rotary", a));
    kv.emplace_back(a + ".rope.dimension_count",
                    GgufValue::u32(static_cast<uint32_t>(config.rope_dims > 0 ? config.rope_dims : config.head_dim)));
    if (config.has_linear_layers() && !qwen35)
      return unimplemented(fmt::format("GGUF {} files cannot state linear-attention layers", a));
    if (qwen35) TS_RETURN_IF_ERROR(write_linear_keys(config, kv));
    kv.emplace_back(a + ".rope.freq_base", GgufValue::f32(config.rope_theta));
    kv.emplace_back(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(config.norm_eps));
  }
  kv.emplace_back(a + ".vocab_size", GgufValue::u32(static_cast<uint32_t>(config.vocab_size)));
  if (a == "gemma2") {
    kv.emplace_back(a + ".attn_logit_softcapping", GgufValue::f32(config.attn_softcap));
    kv.emplace_back(a + ".final_logit_softcapping", GgufValue::f32(config.final_softcap));
  } else if (config.attn_softcap > 0.0f) {
    return unimplemented(fmt::format("GGUF {} files cannot state attention soft-capping", a));
  } else if (config.final_softcap > 0.0f && !gemma4) {
    if (a != "gemma3") return unimplemented(fmt::format("GGUF {} files cannot state final soft-capping", a));
    kv.emplace_back(a + ".final_logit_softcapping", GgufValue::f32(config.final_softcap));
  }
  if (config.sliding_window > 0) {
    kv.emplace_back(a + ".attention.sliding_window", GgufValue::u32(static_cast<uint32_t>(config.sliding_window)));
    if (config.sliding_pattern != probe.sliding_pattern && !gemma4)
      kv.emplace_back(a + ".attention.sliding_window_pattern",
                      GgufValue::u32(static_cast<uint32_t>(config.sliding_pattern)));
  }
  if (config.has_moe_layers()) {
    const MoeConfig& m = config.moe;
    if (a != "qwen3moe" && a != "llama" && a != "gpt-oss" && a != "qwen35moe" && !gemma4)
      return unimplemented(fmt::format("GGUF {} files cannot state mixture-of-experts layers", a));
    if (m.swiglu_limit != probe.moe.swiglu_limit)
      return unimplemented(fmt::format("GGUF {} files cannot state a SwiGLU limit of {}", a, m.swiglu_limit));
    for (int l = 0; l < config.n_layers; ++l)
      if (config.layer_kind(l).ffn != FfnKind::kMoe)
        return unimplemented(fmt::format("GGUF {} files cannot mix dense and expert layers (layer {} is dense)", a, l));
    if (m.gating != probe.moe.gating)
      return unimplemented(fmt::format("GGUF {} files route by {}, not {}", a, expert_gating_name(probe.moe.gating),
                                       expert_gating_name(m.gating)));
    if (a == "llama" && m.expert_hidden_dim != config.hidden_dim)
      return unimplemented("GGUF llama (Mixtral) experts are feed_forward_length wide: expert width must equal it");
    kv.emplace_back(a + ".expert_count", GgufValue::u32(static_cast<uint32_t>(m.n_experts)));
    kv.emplace_back(a + ".expert_used_count", GgufValue::u32(static_cast<uint32_t>(m.n_experts_used)));
    if (a != "llama")
      kv.emplace_back(a + ".expert_feed_forward_length", GgufValue::u32(static_cast<uint32_t>(m.expert_hidden_dim)));
    if (m.normalize_weights != probe.moe.normalize_weights)
      kv.emplace_back(a + ".expert_weights_norm", GgufValue::boolean(m.normalize_weights));
    if (m.weights_scale != 1.0f) kv.emplace_back(a + ".expert_weights_scale", GgufValue::f32(m.weights_scale));
    if (m.shared_expert_hidden_dim > 0) {
      if (a != "qwen35moe") return unimplemented(fmt::format("GGUF {} files cannot state a shared expert", a));
      kv.emplace_back(a + ".expert_shared_feed_forward_length",
                      GgufValue::u32(static_cast<uint32_t>(m.shared_expert_hidden_dim)));
    }
  } else if (a == "qwen35moe") {
    return invalid_argument("a qwen35moe model needs expert layers");
  }
  if (gemma4) {
    write_gemma4_keys(config, kv);
  } else if (config.rope_theta_sliding > 0.0f) {
    if (a != "gemma3") return unimplemented(fmt::format("GGUF {} files cannot state a second rotary base", a));
    if (config.rope_theta_sliding != 10000.0f)
      kv.emplace_back(a + ".rope.freq_base_swa", GgufValue::f32(config.rope_theta_sliding));
  }
  const std::string rk = a + ".rope.scaling.";
  switch (rs.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kLlama3:  // the rope_freqs.weight tensor
      break;
    case RopeScalingType::kLinear:
      kv.emplace_back(rk + "type", GgufValue::str("linear"));
      kv.emplace_back(rk + "factor", GgufValue::f32(rs.factor));
      break;
    case RopeScalingType::kYarn:
      kv.emplace_back(rk + "type", GgufValue::str("yarn"));
      kv.emplace_back(rk + "factor", GgufValue::f32(rs.factor));
      kv.emplace_back(rk + "original_context_length", GgufValue::u32(static_cast<uint32_t>(rs.original_context)));
      kv.emplace_back(rk + "yarn_beta_fast", GgufValue::f32(rs.beta_fast));
      kv.emplace_back(rk + "yarn_beta_slow", GgufValue::f32(rs.beta_slow));
      kv.emplace_back(rk + "attn_factor", GgufValue::f32(rs.mscale / (1.0f + 0.1f * std::log(rs.factor))));
      break;
    case RopeScalingType::kLongrope:
      if (a != "phi3") kv.emplace_back(rk + "type", GgufValue::str("longrope"));
      kv.emplace_back(rk + "attn_factor", GgufValue::f32(rs.mscale));
      kv.emplace_back(rk + "original_context_length", GgufValue::u32(static_cast<uint32_t>(rs.original_context)));
      break;
  }
  std::optional<Vocab> padded;
  if (vocab && static_cast<int>(vocab->tokens.size()) < config.vocab_size) {
    // HF models pad their embedding beyond the tokenizer (Qwen2: 151936 rows, 151665 tokens); GGUF wants one
    // token per row, so the rest become unused "[PAD<id>]" tokens, as llama.cpp's converter writes them.
    padded = *vocab;
    for (auto i = static_cast<int>(padded->tokens.size()); i < config.vocab_size; ++i) {
      padded->tokens.push_back(fmt::format("[PAD{}]", i));
      if (!padded->scores.empty()) padded->scores.push_back(-1e9f);
      if (padded->types.empty()) padded->types.assign(vocab->tokens.size(), kTokenNormal);
      padded->types.push_back(kTokenUnused);
    }
    vocab = &*padded;
  }
  if (vocab) {
    TS_RETURN_IF_ERROR(vocab->validate());
    if (static_cast<int>(vocab->tokens.size()) != config.vocab_size)
      return invalid_argument(fmt::format("the tokenizer has {} tokens but the model's vocabulary is {}",
                                          vocab->tokens.size(), config.vocab_size));
    kv.emplace_back("tokenizer.ggml.model", GgufValue::str(std::string(vocab->kind_name())));
    if (vocab->kind == VocabKind::kByteLevelBpe) kv.emplace_back("tokenizer.ggml.pre", GgufValue::str(vocab->pre));
    kv.emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(vocab->tokens));
    if (!vocab->scores.empty()) kv.emplace_back("tokenizer.ggml.scores", GgufValue::f32_array(vocab->scores));
    if (!vocab->types.empty()) {
      std::vector<int32_t> types = vocab->types;  // visible control tokens are user-defined in files (gguf_vocab.cc)
      for (TokenId id : vocab->visible_control) types[static_cast<size_t>(id)] = kTokenUserDefined;
      kv.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(std::move(types)));
    }
    if (!vocab->merges.empty()) kv.emplace_back("tokenizer.ggml.merges", GgufValue::string_array(vocab->merges));
    auto put_id = [&](const char* key, TokenId id) {
      if (id >= 0) kv.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(id)));
    };
    put_id("tokenizer.ggml.bos_token_id", vocab->bos);
    put_id("tokenizer.ggml.eos_token_id", vocab->eos);
    put_id("tokenizer.ggml.unknown_token_id", vocab->unk);
    put_id("tokenizer.ggml.padding_token_id", vocab->pad);
    if (vocab->kind == VocabKind::kWordPiece) {  // as the converter writes a BERT vocabulary
      put_id("tokenizer.ggml.seperator_token_id", vocab->eos);
      put_id("tokenizer.ggml.cls_token_id", vocab->bos);
      put_id("tokenizer.ggml.mask_token_id", vocab->mask);
      if (!vocab->lowercase)  // llama.cpp lowercases a bert vocabulary unless told otherwise
        kv.emplace_back("tokenizer.ggml.normalizer.lowercase", GgufValue::boolean(false));
      if (vocab->strip_accents != vocab->lowercase)
        kv.emplace_back("tokenizer.ggml.normalizer.strip_accents", GgufValue::boolean(vocab->strip_accents));
    }
    kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(vocab->add_bos));
    if (vocab->add_eos || vocab->kind == VocabKind::kWordPiece)
      kv.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(vocab->add_eos));
    if (vocab->kind == VocabKind::kSentencePiece || vocab->kind == VocabKind::kGemma4Bpe)
      kv.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(vocab->add_space_prefix));
  }
  if (!options.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", GgufValue::str(options.chat_template));

  std::vector<GgufTensor> tensors;
  for (const WeightTensor& t : ex.tensors) {
    GgufTensor g;
    g.name = t.name;
    g.ne.assign(t.shape.rbegin(), t.shape.rend());
    g.dtype = t.dtype;
    g.bytes = t.bytes;
    g.data = t.data;
    tensors.push_back(std::move(g));
  }
  return write_gguf(path, kv, tensors);
}

}  // namespace tessera::model
