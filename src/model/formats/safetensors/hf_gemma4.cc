#include "model/formats/safetensors/hf_gemma4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "model/formats/safetensors/hf_json.h"
#include "model/weight_export.h"

namespace tessera::model::hf {
namespace {

using Json = nlohmann::json;

struct NamePair {
  const char* hf;    // after "model.layers.N."
  const char* gguf;  // after "blk.N."
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"per_layer_input_gate.weight", "inp_gate.weight"},
    {"per_layer_projection.weight", "proj.weight"},
    {"post_per_layer_input_norm.weight", "post_norm.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
    // 26B-A4B's experts beside the MLP, with their router and norms
    {"router.proj.weight", "ffn_gate_inp.weight"},
    {"router.scale", "ffn_gate_inp.scale"},
    {"router.per_expert_scale", "ffn_down_exps.scale"},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight"},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
};
constexpr NamePair kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// The text model's keys: text_config's over the top level's, as the converter merges them.
Json text_keys(const Json& j) {
  auto tc = j.find("text_config");
  if (tc == j.end() || !tc->is_object()) return j;
  Json merged = j;
  for (auto it = tc->begin(); it != tc->end(); ++it) merged[it.key()] = it.value();
  return merged;
}

// rope_parameters.<layer type>: its rope_theta and (full layers) the rotated fraction of the head.
struct RopeParams {
  double theta = 0.0;
  double partial = 1.0;
};
Result<RopeParams> rope_params(const Json& j, const char* type, const std::string& name) {
  auto rp = j.find("rope_parameters");
  if (rp == j.end() || !rp->is_object() || !rp->contains(type) || !(*rp)[type].is_object())
    return invalid_argument(fmt::format("{}: Gemma 4 needs rope_parameters.{} (an object)", name, type));
  const Json& p = (*rp)[type];
  const std::string where = fmt::format("{}: rope_parameters.{}", name, type);
  const std::string rope_type = p.value("rope_type", std::string("default"));
  const bool full = std::string_view(type) == "full_attention";
  if (rope_type != "default" && !(full && rope_type == "proportional"))
    return unimplemented(fmt::format("{}: rope_type '{}' is not supported ({})", where, rope_type,
                                     full ? "proportional or default are" : "default is"));
  RopeParams r;
  auto theta = p.find("rope_theta");
  if (theta == p.end() || !theta->is_number() || !(theta->get<double>() > 0))
    return invalid_argument(fmt::format("{} needs a positive \"rope_theta\"", where));
  r.theta = theta->get<double>();
  TS_ASSIGN_OR_RETURN(r.partial, num_key(p, "partial_rotary_factor", 1.0, where));
  TS_ASSIGN_OR_RETURN(double factor, num_key(p, "factor", 1.0, where));
  if (factor != 1.0) return unimplemented(fmt::format("{}: \"factor\" {} is not supported (1 is)", where, factor));
  if (!(r.partial > 0.0 && r.partial <= 1.0))
    return invalid_argument(fmt::format("{}: partial_rotary_factor {} is not in (0, 1]", where, r.partial));
  if (!full && r.partial != 1.0)
    return unimplemented(
        fmt::format("{}: partial_rotary_factor {} is not supported for sliding layers (1 is)", where, r.partial));
  return r;
}

// The full layers' rotated pairs, as the converter counts them: int(head_dim * partial_rotary_factor / 2).
int rotated_pairs(int head_dim, double partial) { return static_cast<int>(head_dim * partial / 2.0); }

std::string layer_prefix(const std::string& name, std::string* rest) {
  constexpr std::string_view kLayers = "model.layers.";
  if (!name.starts_with(kLayers)) return "";
  const size_t dot = name.find('.', kLayers.size());
  if (dot == std::string::npos) return "";
  *rest = name.substr(dot + 1);
  return name.substr(kLayers.size(), dot - kLayers.size());
}

}  // namespace

bool is_gemma4_architecture(const std::string& hf_arch) {
  return hf_arch == "Gemma4ForCausalLM" || hf_arch == "Gemma4ForConditionalGeneration";
}

Result<ModelConfig> parse_gemma4_config(const Json& root, const std::string& name) {
  auto a = root.find("architectures");
  const bool multimodal =
      a != root.end() && a->is_array() && !a->empty() && (*a)[0] == "Gemma4ForConditionalGeneration";
  if (multimodal && (!root.contains("text_config") || !root["text_config"].is_object()))
    return invalid_argument(fmt::format("{}: Gemma4ForConditionalGeneration needs a \"text_config\" object", name));
  const Json j = text_keys(root);
  ModelConfig c;
  c.arch = "gemma4";
  TS_RETURN_IF_ERROR(apply_arch_features(c));
  TS_RETURN_IF_ERROR(check_gemma_activation(j, name));
  if (j.contains("attention_bias") && j["attention_bias"] == true)
    return unimplemented(fmt::format("{}: attention_bias true is not supported for Gemma 4", name));
  if (auto b = j.find("use_bidirectional_attention"); b != j.end() && !b->is_null() && *b != false)
    return unimplemented(
        fmt::format("{}: use_bidirectional_attention {} is not supported (the text model is causal)", name, b->dump()));
  if (j.contains("per_layer_config") && !j["per_layer_config"].is_null() && !j.contains("global_head_dim"))
    return unimplemented(fmt::format("{}: per_layer_config is not read; Gemma 4 needs \"global_head_dim\"", name));
  TS_ASSIGN_OR_RETURN(c.dim, int_key(j, "hidden_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, int_key(j, "intermediate_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_layers, int_key(j, "num_hidden_layers", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_heads, int_key(j, "num_attention_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(int kv_swa, int_key(j, "num_key_value_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.head_dim_sliding, int_key(j, "head_dim", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.head_dim, int_key(j, "global_head_dim", c.head_dim_sliding, name));
  TS_ASSIGN_OR_RETURN(c.vocab_size, int_key(j, "vocab_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, int_key(j, "max_position_embeddings", 131072, name));
  TS_ASSIGN_OR_RETURN(double eps, num_key(j, "rms_norm_eps", 1e-6, name));
  c.norm_eps = static_cast<float>(eps);
  TS_ASSIGN_OR_RETURN(c.tied_embeddings, bool_or(j, "tie_word_embeddings", true, name));
  TS_ASSIGN_OR_RETURN(double fsc, num_key(j, "final_logit_softcapping", 0.0, name));
  if (fsc < 0) return invalid_argument(fmt::format("{}: final_logit_softcapping {} is negative", name, fsc));
  c.final_softcap = static_cast<float>(fsc);
  TS_ASSIGN_OR_RETURN(c.sliding_window, int_key(j, "sliding_window", std::nullopt, name));
  if (c.sliding_window == 0) return invalid_argument(fmt::format("{}: Gemma 4 needs a sliding_window > 0", name));
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));  // apply_arch_features ran before the width was known
  if (c.n_layers < 1 || c.n_heads < 1 || c.n_layers > 4096)
    return invalid_argument(fmt::format("{}: num_hidden_layers or num_attention_heads is out of range", name));

  // layer_types: Tessera holds the sliding layers as a period closed by one full layer.
  auto lt = j.find("layer_types");
  if (lt == j.end() || !lt->is_array() || lt->size() != static_cast<size_t>(c.n_layers))
    return invalid_argument(
        fmt::format("{}: Gemma 4 needs layer_types with one entry per layer ({})", name, c.n_layers));
  std::vector<bool> sliding;
  for (const Json& t : *lt) {
    if (t != "sliding_attention" && t != "full_attention")
      return invalid_argument(
          fmt::format("{}: layer_types holds {} (sliding_attention or full_attention expected)", name, t.dump()));
    sliding.push_back(t == "sliding_attention");
  }
  c.sliding_pattern = 0;
  for (int period = 1; period <= c.n_layers + 1 && c.sliding_pattern == 0; ++period) {
    c.sliding_pattern = period;
    for (int l = 0; l < c.n_layers; ++l)
      if (sliding[static_cast<size_t>(l)] != c.is_sliding_layer(l)) c.sliding_pattern = 0;
  }
  if (c.sliding_pattern == 0)
    return unimplemented(
        fmt::format("{}: layer_types is not a repeating run of sliding layers closed by one full layer", name));

  TS_ASSIGN_OR_RETURN(RopeParams full, rope_params(j, "full_attention", name));
  TS_ASSIGN_OR_RETURN(RopeParams swa, rope_params(j, "sliding_attention", name));
  c.rope_theta = static_cast<float>(full.theta);
  c.rope_theta_sliding = static_cast<float>(swa.theta);
  if (rotated_pairs(c.head_dim, full.partial) < 1)
    return invalid_argument(
        fmt::format("{}: rope_parameters.full_attention.partial_rotary_factor {} rotates nothing", name, full.partial));

  TS_ASSIGN_OR_RETURN(c.shared_kv_layers, int_key(j, "num_kv_shared_layers", 0, name));
  if (c.shared_kv_layers >= c.n_layers)
    return invalid_argument(fmt::format("{}: num_kv_shared_layers {} leaves no layer of {} with its own KV", name,
                                        c.shared_kv_layers, c.n_layers));
  TS_ASSIGN_OR_RETURN(bool double_wide, bool_or(j, "use_double_wide_mlp", false, name));
  if (double_wide && c.shared_kv_layers > 0)
    for (int l = 0; l < c.n_layers; ++l)
      c.layer_hidden_dims.push_back(l < c.n_layers - c.shared_kv_layers ? c.hidden_dim : 2 * c.hidden_dim);

  TS_ASSIGN_OR_RETURN(c.per_layer_dim, int_key(j, "hidden_size_per_layer_input", 0, name));
  if (c.per_layer_dim > 0) {
    TS_ASSIGN_OR_RETURN(int pl_vocab, int_key(j, "vocab_size_per_layer_input", c.vocab_size, name));
    if (pl_vocab != c.vocab_size)
      return unimplemented(
          fmt::format("{}: vocab_size_per_layer_input {} differs from vocab_size {}", name, pl_vocab, c.vocab_size));
  }

  // KV heads per layer kind: transformers gives the full layers num_global_key_value_heads only when their V is
  // their K (attention_k_eq_v).
  TS_ASSIGN_OR_RETURN(bool k_eq_v, bool_or(j, "attention_k_eq_v", false, name));
  TS_ASSIGN_OR_RETURN(int kv_global, int_key(j, "num_global_key_value_heads", 0, name));
  if (kv_global > 0 && !k_eq_v && kv_global != kv_swa)
    return unimplemented(fmt::format(
        "{}: num_global_key_value_heads {} without attention_k_eq_v (transformers then uses num_key_value_heads {})",
        name, kv_global, kv_swa));
  const int kv_full = k_eq_v && kv_global > 0 ? kv_global : kv_swa;
  c.n_kv_heads = std::max(kv_swa, kv_full);
  if (kv_full != kv_swa)
    for (int l = 0; l < c.n_layers; ++l) c.layer_kv_heads.push_back(c.is_sliding_layer(l) ? kv_swa : kv_full);

  // The MoE block (26B-A4B): experts beside the dense MLP in every layer.
  TS_ASSIGN_OR_RETURN(int experts_stated, int_key(j, "num_experts", 0, name));
  TS_ASSIGN_OR_RETURN(bool moe, bool_or(j, "enable_moe_block", experts_stated > 0, name));
  if (moe) {
    MoeConfig& m = c.moe;
    for (const char* k : {"num_experts", "num_local_experts"})
      if (m.n_experts == 0) {
        TS_ASSIGN_OR_RETURN(m.n_experts, int_key(j, k, 0, name));
      }
    for (const char* k : {"top_k_experts", "num_experts_per_tok"})
      if (m.n_experts_used == 0) {
        TS_ASSIGN_OR_RETURN(m.n_experts_used, int_key(j, k, 0, name));
      }
    for (const char* k : {"moe_intermediate_size", "expert_intermediate_size"})
      if (m.expert_hidden_dim == 0) {
        TS_ASSIGN_OR_RETURN(m.expert_hidden_dim, int_key(j, k, 0, name));
      }
    if (m.n_experts == 0 || m.n_experts_used == 0 || m.expert_hidden_dim == 0)
      return invalid_argument(
          fmt::format("{}: enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size (> 0)", name));
    c.set_all_ffn(FfnKind::kMoe);
  }
  if (Status s = c.validate(); !s.ok()) return s.with_context(name);
  return c;
}

std::optional<std::string> gemma4_gguf_name(const std::string& in) {
  std::string hf = in;
  // Gemma4ForConditionalGeneration: the text model under model.language_model (or the older language_model.model),
  // beside the towers Tessera does not run.
  for (const char* tower : {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.",
                            "vision_tower.", "audio_tower.", "multi_modal_projector.", "model.multi_modal_projector."})
    if (hf.starts_with(tower)) return std::nullopt;
  for (const auto& [from, to] : {std::pair{"model.language_model.", "model."},
                                 std::pair{"language_model.model.", "model."}, std::pair{"language_model.", ""}})
    if (hf.starts_with(from)) {
      hf = to + hf.substr(std::string_view(from).size());
      break;
    }
  for (const NamePair& p : kGlobalNames)
    if (hf == p.hf) return std::string(p.gguf);
  std::string rest;
  const std::string layer = layer_prefix(hf, &rest);
  if (layer.empty()) return hf;
  if (rest.starts_with("self_attn.rotary_emb.")) return std::nullopt;
  for (const NamePair& p : kLayerNames)
    if (rest == p.hf) return "blk." + layer + "." + p.gguf;
  return hf;
}

std::string gemma4_hf_name(const std::string& gguf) {
  for (const NamePair& p : kGlobalNames)
    if (gguf == p.gguf) return p.hf;
  if (!gguf.starts_with("blk.")) return gguf;
  const size_t dot = gguf.find('.', 4);
  if (dot == std::string::npos) return gguf;
  const std::string layer = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
  for (const NamePair& p : kLayerNames)
    if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
  return gguf;
}

Status gemma4_tensors_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c, const std::string& config_json,
                              std::vector<std::vector<uint8_t>>& owned, const std::string& where) {
  std::set<std::string> names;
  for (WeightTensor& t : tensors) {
    if (t.shape.empty() && t.name.ends_with("layer_output_scale.weight")) t.shape = {1};  // a 0-d layer_scalar
    names.insert(t.name);
  }
  const Json j = text_keys(Json::parse(config_json, nullptr, false));
  const bool k_eq_v = j.value("attention_k_eq_v", false) == true;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.is_sliding_layer(l) || l >= c.n_layers - c.shared_kv_layers) continue;
    const bool has_v = names.count(layer_tensor_name(l, "attn_v.weight")) > 0;
    if (!has_v && !k_eq_v)
      return invalid_argument(
          fmt::format("{}: full layer {} has no self_attn.v_proj.weight but attention_k_eq_v is not true", where, l));
    if (has_v && k_eq_v)
      return invalid_argument(
          fmt::format("{}: full layer {} has self_attn.v_proj.weight but attention_k_eq_v says V is K", where, l));
  }
  bool any_full = false;
  for (int l = 0; l < c.n_layers; ++l) any_full = any_full || !c.is_sliding_layer(l);
  if (!any_full) return ok_status();
  // The converter's "proportional" rope for the full layers: frequency factors of 1 for the rotated pairs and 1e30
  // (no rotation) for the rest, read by full layers only.
  TS_ASSIGN_OR_RETURN(RopeParams full, rope_params(j, "full_attention", where));
  const int half = c.head_dim / 2, rotated = rotated_pairs(c.head_dim, full.partial);
  std::vector<float> v(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) v[static_cast<size_t>(i)] = i < rotated ? 1.0f : 1e30f;
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  owned.push_back(std::move(bytes));
  std::erase_if(tensors, [](const WeightTensor& t) { return t.name == "rope_freqs.weight"; });
  tensors.push_back({"rope_freqs.weight", DType::kF32, {half}, owned.back().data(), owned.back().size()});
  return ok_status();
}

Result<Json> gemma4_hf_config(const ModelConfig& c, const ModelWeights& weights, const std::string& torch_dtype) {
  ModelConfig probe;
  probe.arch = c.arch;
  TS_RETURN_IF_ERROR(apply_arch_features(probe));
  if (c.rope_scaling.type != RopeScalingType::kNone || c.attn_softcap > 0.0f || c.rope_dims > 0)
    return unimplemented("Gemma4ForCausalLM configs cannot state rope scaling, attention soft-capping or rope_dims");
  if (c.sliding_window <= 0 || c.sliding_pattern <= 0)
    return invalid_argument("a gemma4 model needs sliding layers (sliding_window and their pattern)");
  const int first_shared = c.n_layers - c.shared_kv_layers;
  bool double_wide = false;
  if (!c.layer_hidden_dims.empty()) {
    // transformers states one width and use_double_wide_mlp (twice as wide in the KV-sharing layers) only.
    for (int l = 0; l < c.n_layers; ++l) {
      const int want = l < first_shared ? c.hidden_dim : 2 * c.hidden_dim;
      if (c.layer_hidden_dim(l) != want)
        return unimplemented(fmt::format(
            "Gemma4ForCausalLM configs state MLP widths per layer only as use_double_wide_mlp (layer {} is {} wide)", l,
            c.layer_hidden_dim(l)));
    }
    double_wide = c.shared_kv_layers > 0;
  }
  int kv_swa = -1, kv_full = -1;
  for (int l = 0; l < c.n_layers; ++l) (c.is_sliding_layer(l) ? kv_swa : kv_full) = c.layer_n_kv_heads(l);
  if (kv_swa < 0) kv_swa = kv_full;
  if (kv_full < 0) kv_full = kv_swa;
  // V = K in the full layers that hold KV: all of them, or none.
  int full_with_v = 0, full_own_kv = 0;
  for (int l = 0; l < first_shared; ++l) {
    if (c.is_sliding_layer(l)) continue;
    ++full_own_kv;
    if (weights.find(layer_tensor_name(l, "attn_v.weight")) != nullptr) ++full_with_v;
  }
  if (full_with_v != 0 && full_with_v != full_own_kv)
    return unimplemented("Gemma4ForCausalLM configs state V = K for all full layers or none (attention_k_eq_v)");
  const bool k_eq_v = full_own_kv > 0 && full_with_v == 0;
  if (kv_full != kv_swa && !k_eq_v)
    return unimplemented(
        "Gemma4ForCausalLM configs give full layers their own KV head count only with attention_k_eq_v");
  // The full layers' rotated fraction from rope_freqs.weight: 1 for the rotated pairs, 1e30 for the rest.
  double partial = 1.0;
  if (const WeightTensor* rf = weights.find("rope_freqs.weight")) {
    TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(*rf));
    if (static_cast<int>(v.size()) != c.head_dim / 2)
      return invalid_argument(
          fmt::format("rope_freqs.weight holds {} values, not head_dim / 2 = {}", v.size(), c.head_dim / 2));
    int rotated = 0;
    while (rotated < static_cast<int>(v.size()) && v[static_cast<size_t>(rotated)] == 1.0f) ++rotated;
    for (size_t i = static_cast<size_t>(rotated); i < v.size(); ++i)
      if (!(v[i] >= 1e29f))
        return unimplemented(
            "rope_freqs.weight is not Gemma 4's proportional rope (1 for rotated pairs, then 1e30): config.json "
            "cannot state it");
    if (rotated == 0) return unimplemented("rope_freqs.weight rotates no pair: config.json cannot state it");
    partial = 2.0 * rotated / c.head_dim;
    while (rotated_pairs(c.head_dim, partial) < rotated) partial = std::nextafter(partial, 2.0);
  }
  const MoeConfig& m = c.moe;
  if (c.has_moe_layers()) {
    for (int l = 0; l < c.n_layers; ++l)
      if (c.layer_kind(l).ffn != FfnKind::kMoe) return unimplemented("Gemma 4's MoE block is in every layer or none");
    if (m.gating != probe.moe.gating || m.normalize_weights != probe.moe.normalize_weights || m.weights_scale != 1.0f ||
        m.swiglu_limit != 0.0f || m.shared_expert_hidden_dim != 0)
      return unimplemented("Gemma4ForCausalLM configs state Gemma 4's own expert routing only");
  }
  Json cfg;
  cfg["architectures"] = {"Gemma4ForCausalLM"};
  cfg["model_type"] = "gemma4_text";
  cfg["hidden_size"] = c.dim;
  cfg["intermediate_size"] = c.hidden_dim;
  cfg["num_hidden_layers"] = c.n_layers;
  cfg["num_attention_heads"] = c.n_heads;
  cfg["num_key_value_heads"] = kv_swa;
  cfg["num_global_key_value_heads"] = k_eq_v ? Json(kv_full) : Json(nullptr);
  cfg["attention_k_eq_v"] = k_eq_v;
  cfg["head_dim"] = c.head_dim_sliding > 0 ? c.head_dim_sliding : c.head_dim;
  cfg["global_head_dim"] = c.head_dim;
  cfg["vocab_size"] = c.vocab_size;
  cfg["max_position_embeddings"] = c.max_seq_len;
  cfg["rms_norm_eps"] = c.norm_eps;
  cfg["tie_word_embeddings"] = c.tied_embeddings;
  cfg["hidden_activation"] = "gelu_pytorch_tanh";
  cfg["attention_bias"] = false;
  cfg["final_logit_softcapping"] = c.final_softcap > 0.0f ? Json(c.final_softcap) : Json(nullptr);
  cfg["sliding_window"] = c.sliding_window;
  Json types = Json::array();
  for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_sliding_layer(l) ? "sliding_attention" : "full_attention");
  cfg["layer_types"] = types;
  const float theta_swa = c.rope_theta_sliding > 0.0f ? c.rope_theta_sliding : c.rope_theta;
  cfg["rope_parameters"] = {
      {"full_attention",
       {{"rope_type", "proportional"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", partial}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", theta_swa}}}};
  cfg["num_kv_shared_layers"] = c.shared_kv_layers;
  cfg["use_double_wide_mlp"] = double_wide;
  cfg["hidden_size_per_layer_input"] = c.per_layer_dim;
  cfg["vocab_size_per_layer_input"] = c.vocab_size;
  cfg["enable_moe_block"] = c.has_moe_layers();
  if (c.has_moe_layers()) {
    cfg["num_experts"] = m.n_experts;
    cfg["top_k_experts"] = m.n_experts_used;
    cfg["moe_intermediate_size"] = m.expert_hidden_dim;
  } else {
    cfg["num_experts"] = nullptr;
    cfg["top_k_experts"] = nullptr;
    cfg["moe_intermediate_size"] = nullptr;
  }
  cfg["torch_dtype"] = torch_dtype;
  return cfg;
}

}  // namespace tessera::model::hf
