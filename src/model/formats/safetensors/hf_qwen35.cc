#include "model/formats/safetensors/hf_qwen35.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "model/formats/safetensors/hf_experts.h"
#include "model/formats/safetensors/hf_json.h"
#include "model/weight_export.h"

namespace tessera::model::hf {
namespace {

using Json = nlohmann::json;

constexpr const char* kArchs[][2] = {{"Qwen3_5ForCausalLM", "qwen35"},
                                     {"Qwen3_5ForConditionalGeneration", "qwen35"},
                                     {"Qwen3_5MoeForCausalLM", "qwen35moe"},
                                     {"Qwen3_5MoeForConditionalGeneration", "qwen35moe"}};

// HF name after "model.layers.N." <-> the engine's suffix after "blk.N.".
struct NamePair {
  const char* hf;
  const char* engine;
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
constexpr NamePair kTopNames[] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                  {"model.norm.weight", "output_norm.weight"},
                                  {"lm_head.weight", "output.weight"}};

// transformers' Qwen3.5 RMSNorm multiplies by (1 + w); its gated norm (linear_attn.norm) by w.
bool shifted_norm(const std::string& engine_name) {
  return engine_name == "output_norm.weight" || engine_name.ends_with(".attn_norm.weight") ||
         engine_name.ends_with(".ffn_norm.weight") || engine_name.ends_with(".attn_q_norm.weight") ||
         engine_name.ends_with(".attn_k_norm.weight");
}

size_t element_bytes(DType t) {
  return dtype_info(t).block_elems == 1 ? static_cast<size_t>(dtype_info(t).block_bytes) : 0;
}

// Value heads between transformers' order, grouped by key head (head g r + j is key head g's j-th), and the engine's
// tiled order (j Hk + g); `src` viewed as [outer][v_heads][block bytes].
std::vector<uint8_t> reorder_v_heads(const uint8_t* src, int64_t outer, int k_heads, int v_heads, size_t block,
                                     bool to_tiled) {
  const int r = v_heads / k_heads;
  std::vector<uint8_t> out(static_cast<size_t>(outer * v_heads) * block);
  for (int64_t o = 0; o < outer; ++o)
    for (int g = 0; g < k_heads; ++g)
      for (int j = 0; j < r; ++j) {
        const int64_t grouped = g * r + j, tiled = j * k_heads + g;
        const int64_t from = to_tiled ? grouped : tiled, to = to_tiled ? tiled : grouped;
        std::memcpy(out.data() + static_cast<size_t>(o * v_heads + to) * block,
                    src + static_cast<size_t>(o * v_heads + from) * block, block);
      }
  return out;
}

// The engine tensors (suffixes after blk.N.) layer `l` holds, with their shapes.
std::vector<std::pair<std::string, std::vector<int64_t>>> layer_tensors(const ModelConfig& c, int l) {
  const int64_t d = c.dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{"attn_norm.weight", {d}}};
  const LinearAttentionConfig& la = c.linear;
  if (c.layer_kind(l).attention == AttentionKind::kLinear) {
    const int64_t ch = la.conv_channels(), vd = la.value_dim(), hv = la.v_heads;
    t.insert(t.end(), {{"attn_qkv.weight", {ch, d}},
                       {"attn_gate.weight", {vd, d}},
                       {"ssm_conv1d.weight", {ch, la.conv_kernel}},
                       {"ssm_dt.bias", {hv}},
                       {"ssm_a", {hv}},
                       {"ssm_beta.weight", {hv, d}},
                       {"ssm_alpha.weight", {hv, d}},
                       {"ssm_norm.weight", {la.head_dim}},
                       {"ssm_out.weight", {d, vd}}});
  } else {
    const int64_t q = c.q_dim(), kv = c.kv_dim();
    t.insert(t.end(), {{"attn_q.weight", {2 * q, d}},
                       {"attn_k.weight", {kv, d}},
                       {"attn_v.weight", {kv, d}},
                       {"attn_q_norm.weight", {c.head_dim}},
                       {"attn_k_norm.weight", {c.head_dim}},
                       {"attn_output.weight", {d, q}}});
  }
  t.push_back({"ffn_norm.weight", {d}});
  if (c.layer_kind(l).ffn == FfnKind::kMoe) {
    const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim, sh = c.moe.shared_expert_hidden_dim;
    t.insert(t.end(), {{"ffn_gate_inp.weight", {e, d}},
                       {"ffn_gate_exps.weight", {e, f, d}},
                       {"ffn_up_exps.weight", {e, f, d}},
                       {"ffn_down_exps.weight", {e, d, f}},
                       {"ffn_gate_inp_shexp.weight", {d}},
                       {"ffn_gate_shexp.weight", {sh, d}},
                       {"ffn_up_shexp.weight", {sh, d}},
                       {"ffn_down_shexp.weight", {d, sh}}});
  } else {
    const int64_t h = c.hidden_dim;
    t.insert(t.end(), {{"ffn_gate.weight", {h, d}}, {"ffn_up.weight", {h, d}}, {"ffn_down.weight", {d, h}}});
  }
  return t;
}

// The HF name of an engine tensor, for messages and for the writer ("" when it has none).
std::string hf_name(const std::string& engine) {
  for (const NamePair& p : kTopNames)
    if (engine == p.engine) return p.hf;
  if (!engine.starts_with("blk.")) return "";
  const size_t dot = engine.find('.', 4);
  const std::string layer = engine.substr(4, dot - 4), rest = engine.substr(dot + 1);
  for (const NamePair& p : kLayerNames)
    if (rest == p.engine) return "model.layers." + layer + "." + p.hf;
  if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight")
    return "model.layers." + layer + ".mlp.experts.gate_up_proj";
  return "";
}

}  // namespace

bool is_qwen35_architecture(const std::string& hf_arch) {
  for (const auto& a : kArchs)
    if (hf_arch == a[0]) return true;
  return false;
}

std::vector<std::string> qwen35_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kArchs) out.push_back(a[0]);
  return out;
}

const char* qwen35_hf_architecture(const ModelConfig& c) {
  return c.arch == "qwen35moe" ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM";
}

Result<ModelConfig> parse_qwen35_config(const Json& top, const std::string& hf_arch, const std::string& name) {
  // llama.cpp's TextModel: the text config's keys over the top level's.
  Json j = top;
  if (auto tc = top.find("text_config"); tc != top.end() && !tc->is_null()) {
    if (!tc->is_object()) return invalid_argument(fmt::format("{}: text_config is not an object", name));
    for (auto it = tc->begin(); it != tc->end(); ++it) j[it.key()] = it.value();
  }
  ModelConfig c;
  for (const auto& a : kArchs)
    if (hf_arch == a[0]) c.arch = a[1];
  const bool moe = c.arch == "qwen35moe";
  TS_RETURN_IF_ERROR(apply_arch_features(c));
  TS_ASSIGN_OR_RETURN(c.dim, int_key(j, "hidden_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_layers, int_key(j, "num_hidden_layers", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_heads, int_key(j, "num_attention_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, int_key(j, "num_key_value_heads", c.n_heads, name));
  TS_ASSIGN_OR_RETURN(c.vocab_size, int_key(j, "vocab_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, int_key(j, "max_position_embeddings", 32768, name));
  TS_ASSIGN_OR_RETURN(c.head_dim, int_key(j, "head_dim", 256, name));  // transformers' default
  if (moe) {  // Qwen3.5-MoE configs have no dense width: the experts are the feed-forward
    TS_ASSIGN_OR_RETURN(int expert, int_key(j, "moe_intermediate_size", std::nullopt, name));
    TS_ASSIGN_OR_RETURN(c.hidden_dim, int_key(j, "intermediate_size", expert, name));
  } else {
    TS_ASSIGN_OR_RETURN(c.hidden_dim, int_key(j, "intermediate_size", std::nullopt, name));
  }
  TS_ASSIGN_OR_RETURN(double eps, num_key(j, "rms_norm_eps", 1e-6, name));
  c.norm_eps = static_cast<float>(eps);
  TS_ASSIGN_OR_RETURN(std::optional<bool> tie_top, bool_key(top, "tie_word_embeddings", name));
  TS_ASSIGN_OR_RETURN(std::optional<bool> tie_text, bool_key(j, "tie_word_embeddings", name));
  c.tied_embeddings = tie_top.value_or(tie_text.value_or(false));  // the top level's wins, as in transformers
  TS_ASSIGN_OR_RETURN(std::string act, str_key(j, "hidden_act", "silu", name));
  if (act != "silu") return unimplemented(fmt::format("{}: hidden_act '{}' is not supported (silu is)", name, act));
  TS_ASSIGN_OR_RETURN(std::optional<bool> bias, bool_key(j, "attention_bias", name));
  if (bias.value_or(false))
    return unimplemented(fmt::format("{}: attention_bias true is not supported for {}", name, hf_arch));
  TS_ASSIGN_OR_RETURN(std::optional<bool> gate, bool_key(j, "attn_output_gate", name));
  if (!gate.value_or(true))
    return unimplemented(
        fmt::format("{}: attn_output_gate false is not supported (Qwen3.5 gates its attention)", name));

  // The gated delta-net layers: no defaults, as their shape is the model's own.
  LinearAttentionConfig& la = c.linear;
  TS_ASSIGN_OR_RETURN(la.conv_kernel, int_key(j, "linear_conv_kernel_dim", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(la.head_dim, int_key(j, "linear_key_head_dim", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(int v_dim, int_key(j, "linear_value_head_dim", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(la.k_heads, int_key(j, "linear_num_key_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(la.v_heads, int_key(j, "linear_num_value_heads", std::nullopt, name));
  if (v_dim != la.head_dim)
    return unimplemented(
        fmt::format("{}: linear_value_head_dim {} differs from linear_key_head_dim {}", name, v_dim, la.head_dim));
  if (la.conv_kernel < 1 || la.head_dim < 1 || la.k_heads < 1 || la.v_heads < 1 || la.v_heads % la.k_heads != 0)
    return invalid_argument(fmt::format(
        "{}: linear_num_value_heads {} must be a positive multiple of linear_num_key_heads {} (and the kernel and "
        "head sizes positive)",
        name, la.v_heads, la.k_heads));

  // Which layers are full attention: layer_types, else transformers' rule from full_attention_interval.
  std::vector<AttentionKind> kinds;
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int>(lt->size()) != c.n_layers)
      return invalid_argument(
          fmt::format("{}: layer_types must list one type for each of the {} layers", name, c.n_layers));
    for (const Json& t : *lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s != "linear_attention" && s != "full_attention")
        return unimplemented(
            fmt::format("{}: layer_types entry '{}' is not supported (linear_attention, full_attention are)", name, s));
      kinds.push_back(s == "linear_attention" ? AttentionKind::kLinear : AttentionKind::kFull);
    }
  } else {
    TS_ASSIGN_OR_RETURN(int interval, int_key(j, "full_attention_interval", 4, name));
    if (interval < 1) return invalid_argument(fmt::format("{}: full_attention_interval must be positive", name));
    for (int l = 0; l < c.n_layers; ++l)
      kinds.push_back((l + 1) % interval != 0 ? AttentionKind::kLinear : AttentionKind::kFull);
  }
  const FfnKind ffn = moe ? FfnKind::kMoe : FfnKind::kDense;
  c.layer_kinds.clear();
  for (AttentionKind k : kinds) c.layer_kinds.push_back({k, ffn});
  c.compact_layer_kinds();

  // Rotary: rope_parameters (transformers 5) or rope_scaling, with top-level fallbacks as llama.cpp reads them.
  Json rp = Json::object();
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (auto it = j.find(k); it != j.end() && it->is_object()) {
      rp = *it;
      break;
    }
  TS_ASSIGN_OR_RETURN(std::string old_type, str_key(rp, "type", "default", name));
  TS_ASSIGN_OR_RETURN(std::string type, str_key(rp, "rope_type", old_type, name));
  if (type != "default")
    return unimplemented(fmt::format("{}: rope_type '{}' is not supported for Qwen3.5 (default is)", name, type));
  TS_ASSIGN_OR_RETURN(double theta_top, num_key(j, "rope_theta", 10000.0, name));
  TS_ASSIGN_OR_RETURN(double theta, num_key(rp, "rope_theta", theta_top, name));
  TS_ASSIGN_OR_RETURN(double prf_top, num_key(j, "partial_rotary_factor", 0.25, name));
  TS_ASSIGN_OR_RETURN(double prf, num_key(rp, "partial_rotary_factor", prf_top, name));
  c.rope_theta = static_cast<float>(theta);
  const int rot = static_cast<int>(c.head_dim * prf);
  if (!(prf > 0.0) || rot < 2 || rot > c.head_dim || rot % 2 != 0)
    return invalid_argument(
        fmt::format("{}: partial_rotary_factor {} rotates {} of head_dim {} (needs an even count of at least 2)", name,
                    prf, rot, c.head_dim));
  c.rope_dims = rot == c.head_dim ? 0 : rot;
  c.rope_sections = {11, 11, 10, 0};  // llama.cpp's default for Qwen3.5 when the config has none
  if (auto ms = rp.find("mrope_section"); ms != rp.end() && !ms->is_null()) {
    if (!ms->is_array() || ms->empty() || ms->size() > 4)
      return invalid_argument(fmt::format("{}: mrope_section must list 1 to 4 integers", name));
    c.rope_sections.clear();
    for (const Json& v : *ms) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1024)
        return invalid_argument(fmt::format("{}: mrope_section holds {}", name, v.dump()));
      c.rope_sections.push_back(v.get<int>());
    }
    c.rope_sections.resize(4, 0);
  }

  if (moe) {
    MoeConfig& m = c.moe;
    TS_ASSIGN_OR_RETURN(m.n_experts, int_key(j, "num_experts", std::nullopt, name));
    TS_ASSIGN_OR_RETURN(m.n_experts_used, int_key(j, "num_experts_per_tok", std::nullopt, name));
    TS_ASSIGN_OR_RETURN(m.expert_hidden_dim, int_key(j, "moe_intermediate_size", std::nullopt, name));
    TS_ASSIGN_OR_RETURN(m.shared_expert_hidden_dim, int_key(j, "shared_expert_intermediate_size", std::nullopt, name));
    if (m.n_experts < 1 || m.n_experts_used < 1 || m.n_experts_used > m.n_experts || m.expert_hidden_dim < 1 ||
        m.shared_expert_hidden_dim < 1)
      return invalid_argument(
          fmt::format("{}: num_experts, num_experts_per_tok (at most num_experts), moe_intermediate_size and "
                      "shared_expert_intermediate_size must be positive",
                      name));
    TS_ASSIGN_OR_RETURN(std::optional<bool> norm, bool_key(j, "norm_topk_prob", name));
    if (!norm.value_or(true))
      return unimplemented(fmt::format("{}: norm_topk_prob false is not supported (Qwen3.5-MoE renormalises)", name));
    if (auto mo = j.find("mlp_only_layers"); mo != j.end() && mo->is_array() && !mo->empty())
      return unimplemented(
          fmt::format("{}: mlp_only_layers (dense layers among Qwen3.5-MoE's) is not supported", name));
  }
  if (Status s = c.validate(); !s.ok()) return s.with_context(name);
  return c;
}

Status write_qwen35_config(const ModelConfig& c, Json& cfg) {
  const bool moe = c.arch == "qwen35moe";
  if (!c.linear.enabled() || c.rope_sections.size() != 4)
    return unimplemented("a Qwen3.5 config needs its linear-attention shape and four M-RoPE sections");
  if (c.rope_scaling.type != RopeScalingType::kNone || c.sliding_window > 0)
    return unimplemented("Qwen3.5 configs state no rope scaling and no sliding window");
  cfg["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  for (const char* k : {"rope_theta", "rope_scaling", "sliding_window"}) cfg.erase(k);
  Json types = Json::array();
  int interval = 0;  // the full_attention_interval that gives these layers, if one does
  for (int l = 0; l < c.n_layers; ++l) {
    const bool full = c.layer_kind(l).attention == AttentionKind::kFull;
    types.push_back(full ? "full_attention" : "linear_attention");
    if (full && interval == 0) interval = l + 1;
  }
  for (int l = 0; l < c.n_layers && interval > 0; ++l)
    if ((c.layer_kind(l).attention == AttentionKind::kFull) != ((l + 1) % interval == 0)) interval = 0;
  cfg["layer_types"] = types;
  if (interval > 0) cfg["full_attention_interval"] = interval;  // what llama.cpp's converter reads
  cfg["linear_conv_kernel_dim"] = c.linear.conv_kernel;
  cfg["linear_key_head_dim"] = c.linear.head_dim;
  cfg["linear_value_head_dim"] = c.linear.head_dim;
  cfg["linear_num_key_heads"] = c.linear.k_heads;
  cfg["linear_num_value_heads"] = c.linear.v_heads;
  cfg["attention_bias"] = false;
  cfg["attn_output_gate"] = true;
  const int rot = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  Json sections = Json::array();
  for (size_t i = 0; i < 4; ++i)
    if (i < 3 || c.rope_sections[i] != 0) sections.push_back(c.rope_sections[i]);
  cfg["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", c.rope_theta},
                            {"partial_rotary_factor", static_cast<double>(rot) / c.head_dim},
                            {"mrope_section", sections},
                            {"mrope_interleaved", true}};
  if (static_cast<int>(c.head_dim * (static_cast<double>(rot) / c.head_dim)) != rot)
    return unimplemented(fmt::format("{} rotated dimensions of {} is no partial_rotary_factor", rot, c.head_dim));
  if (moe) {
    const MoeConfig& m = c.moe;
    if (m.gating != ExpertGating::kSoftmax || !m.normalize_weights || m.weights_scale != 1.0f ||
        m.swiglu_limit != 0.0f || m.shared_expert_hidden_dim <= 0)
      return unimplemented(
          "Qwen3_5MoeForCausalLM routes by softmax, renormalised, unscaled, with a shared expert; this model does not");
    for (int l = 0; l < c.n_layers; ++l)
      if (c.layer_kind(l).ffn != FfnKind::kMoe)
        return unimplemented("Qwen3_5MoeForCausalLM has experts in every layer");
    cfg["num_experts"] = m.n_experts;
    cfg["num_experts_per_tok"] = m.n_experts_used;
    cfg["moe_intermediate_size"] = m.expert_hidden_dim;
    cfg["shared_expert_intermediate_size"] = m.shared_expert_hidden_dim;
    cfg["norm_topk_prob"] = true;
  } else if (c.has_moe_layers()) {
    return unimplemented("Qwen3_5ForCausalLM has no experts");
  }
  return ok_status();
}

std::optional<std::string> qwen35_tensor_name(const std::string& in) {
  std::string hf = in;
  if (size_t at = hf.find("language_model."); at != std::string::npos) hf.erase(at, 15);  // as llama.cpp does
  if (hf.starts_with("mtp.") || hf.starts_with("model.mtp.") || hf.find("visual.") != std::string::npos ||
      hf.ends_with("rotary_emb.inv_freq"))
    return std::nullopt;  // multi-token prediction and the vision tower: not run
  if (hf.starts_with("layers.") || hf == "embed_tokens.weight" || hf == "norm.weight") hf = "model." + hf;
  for (const NamePair& p : kTopNames)
    if (hf == p.hf) return std::string(p.engine);
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf.starts_with(kPrefix)) return hf;
  const size_t dot = hf.find('.', kPrefix.size());
  if (dot == std::string::npos) return hf;
  const std::string layer = hf.substr(kPrefix.size(), dot - kPrefix.size());
  std::string rest = hf.substr(dot + 1);
  if (rest == "mlp.experts.gate_up_proj.weight" || rest == "mlp.experts.down_proj.weight")
    rest.resize(rest.size() - 7);  // the ".weight" some exports add
  for (const NamePair& p : kLayerNames)
    if (rest == p.hf) return "blk." + layer + "." + p.engine;
  return hf;  // per-expert matrices (stacked later) or a name refused later
}

Status qwen35_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                      std::vector<std::vector<uint8_t>>& owned, const std::string& where) {
  if (c.has_moe_layers()) TS_RETURN_IF_ERROR(stack_experts(tensors, c, /*mixtral=*/false, owned, where));
  auto own = [&](std::vector<uint8_t> bytes) -> const uint8_t* {
    owned.push_back(std::move(bytes));
    return owned.back().data();
  };
  auto named = [](const WeightTensor& t) {
    const std::string h = hf_name(t.name);
    return h.empty() ? t.name : h;
  };
  // Fused experts split into the engine's gate and up stacks (llama.cpp's converter splits them the same way).
  std::vector<WeightTensor> out;
  for (WeightTensor& t : tensors) {
    if (!t.name.ends_with(".ffn_gate_up_exps.weight")) {
      out.push_back(std::move(t));
      continue;
    }
    const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim, d = c.dim;
    if (t.shape != std::vector<int64_t>{e, 2 * f, d} || element_bytes(t.dtype) == 0)
      return invalid_argument(fmt::format("{}: tensor {} has shape [{}], expected [{}, {}, {}]", where, named(t),
                                          fmt::join(t.shape, ", "), e, 2 * f, d));
    const size_t half = static_cast<size_t>(f * d) * element_bytes(t.dtype);
    std::vector<uint8_t> gate(half * static_cast<size_t>(e)), up(gate.size());
    for (int64_t x = 0; x < e; ++x) {
      std::memcpy(gate.data() + half * static_cast<size_t>(x), t.data + 2 * half * static_cast<size_t>(x), half);
      std::memcpy(up.data() + half * static_cast<size_t>(x), t.data + 2 * half * static_cast<size_t>(x) + half, half);
    }
    const std::string base = t.name.substr(0, t.name.size() - std::string_view("ffn_gate_up_exps.weight").size());
    const size_t bytes = gate.size();
    out.push_back({base + "ffn_gate_exps.weight", t.dtype, {e, f, d}, own(std::move(gate)), bytes});
    out.push_back({base + "ffn_up_exps.weight", t.dtype, {e, f, d}, own(std::move(up)), bytes});
  }
  tensors = std::move(out);

  // Every tensor the config implies, in its shape; nothing else.
  std::map<std::string, std::vector<int64_t>> want = {{"token_embd.weight", {c.vocab_size, c.dim}},
                                                      {"output_norm.weight", {c.dim}}};
  if (!c.tied_embeddings) want["output.weight"] = {c.vocab_size, c.dim};
  for (int l = 0; l < c.n_layers; ++l)
    for (auto& [suffix, shape] : layer_tensors(c, l)) want[layer_tensor_name(l, suffix)] = shape;
  std::set<std::string> seen;
  for (WeightTensor& t : tensors) {
    if (t.name == "output.weight" && c.tied_embeddings) continue;  // some exports store it anyway: unused
    auto it = want.find(t.name);
    if (it == want.end())
      return invalid_argument(fmt::format(
          "{}: tensor {} is not part of this Qwen3.5 text model (its layer_types and sizes)", where, named(t)));
    // The stored forms of two shapes: conv1d [C, 1, K] and the shared expert's gate [1, dim].
    if (t.name.ends_with(".ssm_conv1d.weight") && t.shape.size() == 3 && t.shape[1] == 1)
      t.shape = {t.shape[0], t.shape[2]};
    if (t.name.ends_with(".ffn_gate_inp_shexp.weight") && t.shape.size() == 2 && t.shape[0] == 1)
      t.shape = {t.shape[1]};
    if (t.shape != it->second || element_bytes(t.dtype) == 0)
      return invalid_argument(fmt::format("{}: tensor {} has shape [{}] {}, expected [{}] in f32/f16/bf16", where,
                                          named(t), fmt::join(t.shape, ", "), dtype_name(t.dtype),
                                          fmt::join(it->second, ", ")));
    seen.insert(t.name);
  }
  for (const auto& [n, shape] : want)
    if (!seen.count(n)) {
      const std::string h = hf_name(n);
      return invalid_argument(fmt::format("{}: tensor {} is missing", where, h.empty() ? n : h));
    }

  const LinearAttentionConfig& la = c.linear;
  const bool reorder = la.v_heads != la.k_heads;
  const int64_t s = la.head_dim, qk = 2 * static_cast<int64_t>(la.k_heads) * s;
  for (WeightTensor& t : tensors) {
    auto f32 = [&](std::vector<float> v) {
      t.dtype = DType::kF32;
      t.bytes = v.size() * sizeof(float);
      std::vector<uint8_t> bytes(t.bytes);
      std::memcpy(bytes.data(), v.data(), t.bytes);
      t.data = own(std::move(bytes));
    };
    const size_t es = element_bytes(t.dtype);
    const size_t row = t.shape.size() == 2 ? static_cast<size_t>(t.shape[1]) * es : es;
    if (shifted_norm(t.name)) {
      TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(t));
      for (float& x : v) x += 1.0f;
      f32(std::move(v));
    } else if (t.name.ends_with(".ssm_a") || t.name.ends_with(".ssm_dt.bias") ||
               t.name.ends_with(".ssm_conv1d.weight")) {
      TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(t));
      if (t.name.ends_with(".ssm_a"))
        for (float& x : v) x = -std::exp(x);  // A_log -> A
      f32(std::move(v));
      if (reorder) {
        const size_t r = t.name.ends_with("conv1d.weight") ? static_cast<size_t>(t.shape[1]) * sizeof(float) : 4;
        const size_t skip = t.name.ends_with("conv1d.weight") ? static_cast<size_t>(qk) * r : 0;
        const size_t block = t.name.ends_with("conv1d.weight") ? static_cast<size_t>(s) * r : r;
        std::vector<uint8_t> v2(t.data, t.data + skip);
        std::vector<uint8_t> moved = reorder_v_heads(t.data + skip, 1, la.k_heads, la.v_heads, block, true);
        v2.insert(v2.end(), moved.begin(), moved.end());
        t.data = own(std::move(v2));
      }
    } else if (reorder && (t.name.ends_with(".attn_qkv.weight") || t.name.ends_with(".attn_gate.weight") ||
                           t.name.ends_with(".ssm_beta.weight") || t.name.ends_with(".ssm_alpha.weight"))) {
      const bool per_head_row = t.name.ends_with("beta.weight") || t.name.ends_with("alpha.weight");
      const size_t skip = t.name.ends_with(".attn_qkv.weight") ? static_cast<size_t>(qk) * row : 0;
      std::vector<uint8_t> v(t.data, t.data + skip);
      std::vector<uint8_t> moved =
          reorder_v_heads(t.data + skip, 1, la.k_heads, la.v_heads, per_head_row ? row : s * row, true);
      v.insert(v.end(), moved.begin(), moved.end());
      t.data = own(std::move(v));
    } else if (reorder && t.name.ends_with(".ssm_out.weight")) {
      t.data = own(reorder_v_heads(t.data, t.shape[0], la.k_heads, la.v_heads, static_cast<size_t>(s) * es, true));
    }
  }
  return ok_status();
}

Status qwen35_to_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                    std::vector<std::vector<uint8_t>>& owned) {
  auto own = [&](std::vector<uint8_t> bytes) -> const uint8_t* {
    owned.push_back(std::move(bytes));
    return owned.back().data();
  };
  std::map<std::string, const WeightTensor*> by_name;
  for (const WeightTensor& t : tensors) by_name[t.name] = &t;
  const LinearAttentionConfig& la = c.linear;
  const bool reorder = la.v_heads != la.k_heads;
  const int64_t s = la.head_dim, qk = 2 * static_cast<int64_t>(la.k_heads) * s;
  std::vector<WeightTensor> out;
  for (const WeightTensor& in : tensors) {
    WeightTensor t = in;
    t.name = hf_name(in.name);
    const size_t es = element_bytes(t.dtype);
    if (t.name.empty() || es == 0)
      return unimplemented(
          fmt::format("tensor {} ({}) has no place in a Qwen3.5 Hugging Face folder", in.name, dtype_name(in.dtype)));
    auto f32 = [&](std::vector<float> v) {
      t.dtype = DType::kF32;
      t.bytes = v.size() * sizeof(float);
      std::vector<uint8_t> bytes(t.bytes);
      std::memcpy(bytes.data(), v.data(), t.bytes);
      t.data = own(std::move(bytes));
    };
    const std::string& n = in.name;
    if (n.ends_with(".ffn_up_exps.weight")) continue;  // fused with its gate below
    if (n.ends_with(".ffn_gate_exps.weight")) {
      auto up = by_name.find(n.substr(0, n.size() - std::string_view("gate_exps.weight").size()) + "up_exps.weight");
      if (up == by_name.end() || up->second->dtype != in.dtype || up->second->shape != in.shape || in.shape.size() != 3)
        return invalid_argument(fmt::format("{}: its ffn_up_exps is missing or differs in type or shape", n));
      const int64_t e = in.shape[0];
      const size_t half = in.bytes / static_cast<size_t>(e);
      std::vector<uint8_t> gu(2 * in.bytes);
      for (int64_t x = 0; x < e; ++x) {
        std::memcpy(gu.data() + 2 * half * static_cast<size_t>(x), in.data + half * static_cast<size_t>(x), half);
        std::memcpy(gu.data() + 2 * half * static_cast<size_t>(x) + half,
                    up->second->data + half * static_cast<size_t>(x), half);
      }
      t.shape = {e, 2 * in.shape[1], in.shape[2]};
      t.bytes = gu.size();
      t.data = own(std::move(gu));
    } else if (shifted_norm(n)) {
      TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(in));
      for (float& x : v) x -= 1.0f;
      f32(std::move(v));
    } else if (n.ends_with(".ssm_a")) {
      TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(in));
      for (float& x : v) {
        if (!(x < 0.0f)) return invalid_argument(fmt::format("{} holds {}: A_log = log(-A) needs A < 0", n, x));
        x = std::log(-x);
      }
      f32(std::move(v));
    } else if (n.ends_with(".ffn_gate_inp_shexp.weight")) {
      t.shape = {1, in.numel()};
    }
    // Value heads back to transformers' grouped order.
    const bool conv = n.ends_with(".ssm_conv1d.weight");
    if (reorder && (conv || n.ends_with(".attn_qkv.weight") || n.ends_with(".attn_gate.weight") ||
                    n.ends_with(".ssm_beta.weight") || n.ends_with(".ssm_alpha.weight") || n.ends_with(".ssm_a") ||
                    n.ends_with(".ssm_dt.bias"))) {
      const size_t r =
          t.shape.size() == 2 ? static_cast<size_t>(t.shape[1]) * element_bytes(t.dtype) : element_bytes(t.dtype);
      const bool per_head_row = t.shape.size() == 1 || n.ends_with("beta.weight") || n.ends_with("alpha.weight");
      const size_t skip = conv || n.ends_with(".attn_qkv.weight") ? static_cast<size_t>(qk) * r : 0;
      if (t.bytes != skip + static_cast<size_t>(la.v_heads) * (per_head_row ? r : s * r))
        return invalid_argument(
            fmt::format("{} has shape [{}], not this model's linear-attention shape", n, fmt::join(t.shape, ", ")));
      std::vector<uint8_t> v(t.data, t.data + skip);
      std::vector<uint8_t> moved =
          reorder_v_heads(t.data + skip, 1, la.k_heads, la.v_heads, per_head_row ? r : s * r, false);
      v.insert(v.end(), moved.begin(), moved.end());
      t.data = own(std::move(v));
    } else if (reorder && n.ends_with(".ssm_out.weight")) {
      if (t.shape.size() != 2 || t.shape[1] != la.value_dim())
        return invalid_argument(
            fmt::format("{} has shape [{}], not [dim, {}]", n, fmt::join(t.shape, ", "), la.value_dim()));
      t.data = own(reorder_v_heads(t.data, t.shape[0], la.k_heads, la.v_heads, static_cast<size_t>(s) * es, false));
    }
    if (conv) t.shape = {t.shape[0], 1, t.shape[1]};
    out.push_back(std::move(t));
  }
  tensors = std::move(out);
  return ok_status();
}

}  // namespace tessera::model::hf
