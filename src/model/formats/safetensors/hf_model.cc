#include "model/formats/safetensors/hf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/bert.h"
#include "model/formats/safetensors/hf_experts.h"
#include "model/formats/safetensors/hf_gemma4.h"
#include "model/formats/safetensors/hf_gpt_oss.h"
#include "model/formats/safetensors/hf_json.h"
#include "model/formats/safetensors/hf_qwen35.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/rope_permute.h"
#include "model/tokenizer/load_tokenizer.h"
#include "model/weight_export.h"

namespace tessera::model {
namespace fs = std::filesystem;
namespace {

using Json = nlohmann::json;
using hf::int_key;
using hf::num_key;

struct NamePair {
  const char* hf;
  const char* gguf;
};
// Gemma names its norms differently (post_attention_layernorm is the norm after attention, not before the MLP).
constexpr NamePair kGemmaLayerNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"mlp.gate_up_proj.weight", "ffn_gate_up.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // gpt-oss
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.sinks", "attn_sinks.weight"},
    {"mlp.router.weight", "ffn_gate_inp.weight"},
    {"mlp.router.bias", "ffn_gate_inp.bias"},
};

// HF name -> GGUF name; nullopt for tensors the engine does not use (rotary caches).
std::optional<std::string> to_gguf_name(const std::string& hf_in, bool gemma) {
  // Checkpoints saved from the bare model class (Qwen3-Embedding: Qwen3Model) lack the "model." prefix.
  const bool bare = hf_in.starts_with("layers.") || hf_in == "embed_tokens.weight" || hf_in == "norm.weight";
  const std::string hf = bare ? "model." + hf_in : hf_in;
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf.rfind(kPrefix, 0) != 0) return hf;
  size_t dot = hf.find('.', kPrefix.size());
  if (dot == std::string::npos) return hf;
  std::string layer = hf.substr(kPrefix.size(), dot - kPrefix.size());
  std::string rest = hf.substr(dot + 1);
  if (rest == "self_attn.rotary_emb.inv_freq") return std::nullopt;
  if (std::string e = hf::expert_tensor_suffix(rest); !e.empty()) return "blk." + layer + "." + e;
  if (gemma)
    for (const NamePair& p : kGemmaLayerNames)
      if (rest == p.hf) return "blk." + layer + "." + p.gguf;
  for (const NamePair& p : kLayerNames)
    if (rest == p.hf) return "blk." + layer + "." + p.gguf;
  return hf;
}

std::string to_hf_name(const std::string& gguf, bool gemma) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  if (gguf.rfind("blk.", 0) == 0) {
    size_t dot = gguf.find('.', 4);
    std::string layer = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
    if (gemma)
      for (const NamePair& p : kGemmaLayerNames)
        if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
    for (const NamePair& p : kLayerNames)
      if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
  }
  return gguf;
}

struct Storage {
  std::vector<std::shared_ptr<MappedFile>> files;
  std::vector<std::vector<uint8_t>> owned;
};

}  // namespace

bool looks_like_hf_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

namespace {

struct HfArch {
  const char* hf;
  const char* arch;
};
constexpr HfArch kHfArchs[] = {
    {"LlamaForCausalLM", "llama"},   {"MistralForCausalLM", "llama"},
    {"Qwen2ForCausalLM", "qwen2"},   {"Qwen3ForCausalLM", "qwen3"},
    {"Gemma2ForCausalLM", "gemma2"}, {"Gemma3ForCausalLM", "gemma3"},
    {"Phi3ForCausalLM", "phi3"},     {"Qwen3MoeForCausalLM", "qwen3moe"},
    {"MixtralForCausalLM", "llama"}, {"GptOssForCausalLM", "gpt-oss"},
    {"Qwen3Model", "qwen3"},         {"Qwen2Model", "qwen2"},
};

// The rope_scaling object (rope_type or its older spelling type), resolved to what the runner computes.
Status parse_rope_scaling(const Json& j, ModelConfig& c, const std::string& name) {
  auto rs = j.find("rope_scaling");
  if (rs == j.end() || rs->is_null()) return ok_status();
  if (!rs->is_object()) return invalid_argument(fmt::format("{}: rope_scaling is not an object", name));
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (rs->contains(k) && (*rs)[k].is_string()) type = (*rs)[k].get<std::string>();
  if (type.empty() || type == "default") return ok_status();
  const std::string where = fmt::format("{}: rope_scaling ({})", name, type);
  auto num = [&](const char* key, std::optional<double> fallback) -> Result<double> {
    auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) {
      if (fallback) return *fallback;
      return invalid_argument(fmt::format("{} needs \"{}\"", where, key));
    }
    if (!it->is_number()) return invalid_argument(fmt::format("{}: \"{}\" is not a number", where, key));
    return it->get<double>();
  };
  RopeScaling& r = c.rope_scaling;
  TS_ASSIGN_OR_RETURN(int orig_top, int_key(j, "original_max_position_embeddings", 0, name));
  if (type == "linear") {
    r.type = RopeScalingType::kLinear;
    TS_ASSIGN_OR_RETURN(double f, num("factor", std::nullopt));
    r.factor = static_cast<float>(f);
  } else if (type == "llama3") {
    r.type = RopeScalingType::kLlama3;
    TS_ASSIGN_OR_RETURN(double f, num("factor", std::nullopt));
    TS_ASSIGN_OR_RETURN(double lo, num("low_freq_factor", std::nullopt));
    TS_ASSIGN_OR_RETURN(double hi, num("high_freq_factor", std::nullopt));
    TS_ASSIGN_OR_RETURN(double orig, num("original_max_position_embeddings", std::nullopt));
    r.factor = static_cast<float>(f);
    r.low_freq_factor = static_cast<float>(lo);
    r.high_freq_factor = static_cast<float>(hi);
    r.original_context = static_cast<int>(orig);
  } else if (type == "yarn") {
    for (const char* k : {"mscale", "mscale_all_dim"})
      if (rs->contains(k) && !(*rs)[k].is_null())
        return unimplemented(fmt::format("{}: \"{}\" (DeepSeek's YaRN variant) is not supported", where, k));
    if (rs->contains("truncate") && (*rs)["truncate"] == false)
      return unimplemented(fmt::format("{}: \"truncate\": false is not supported", where));
    r.type = RopeScalingType::kYarn;
    TS_ASSIGN_OR_RETURN(double f, num("factor", std::nullopt));
    TS_ASSIGN_OR_RETURN(double orig, num("original_max_position_embeddings",
                                         orig_top > 0 ? std::optional<double>(orig_top) : std::nullopt));
    TS_ASSIGN_OR_RETURN(double bf, num("beta_fast", 32.0));
    TS_ASSIGN_OR_RETURN(double bs, num("beta_slow", 1.0));
    r.factor = static_cast<float>(f);
    r.original_context = static_cast<int>(orig);
    r.beta_fast = static_cast<float>(bf);
    r.beta_slow = static_cast<float>(bs);
    TS_ASSIGN_OR_RETURN(double af, num("attention_factor", 0.1 * std::log(f) + 1.0));
    r.mscale = static_cast<float>(af);
  } else if (type == "longrope") {
    r.type = RopeScalingType::kLongrope;
    TS_ASSIGN_OR_RETURN(double orig, num("original_max_position_embeddings",
                                         orig_top > 0 ? std::optional<double>(orig_top) : std::nullopt));
    r.original_context = static_cast<int>(orig);
    TS_ASSIGN_OR_RETURN(double f, num("factor", static_cast<double>(c.max_seq_len) / orig));
    r.factor = static_cast<float>(f);
    const double fallback = f <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(f) / std::log(orig));
    TS_ASSIGN_OR_RETURN(double af, num("attention_factor", fallback));
    r.mscale = static_cast<float>(af);
    for (const char* k : {"short_factor", "long_factor"}) {
      auto it = rs->find(k);
      if (it == rs->end() || !it->is_array() || static_cast<int>(it->size()) != c.head_dim / 2)
        return invalid_argument(
            fmt::format("{} needs \"{}\" as a list of head_dim / 2 = {} numbers", where, k, c.head_dim / 2));
      for (const Json& v : *it)
        if (!v.is_number()) return invalid_argument(fmt::format("{}: \"{}\" holds a non-number", where, k));
    }
  } else {
    return unimplemented(
        fmt::format("{}: rope_scaling type '{}' is not supported (linear, llama3, yarn, longrope are)", name, type));
  }
  return ok_status();
}

// Gemma's and Phi-3's extra settings, refused where they ask for something the engine does not compute.
Status parse_family(const Json& j, ModelConfig& c, const std::string& name) {
  auto opt_num = [&](const char* key, double fallback) -> Result<double> { return num_key(j, key, fallback, name); };
  if (c.arch == "gemma2" || c.arch == "gemma3") {
    TS_RETURN_IF_ERROR(hf::check_gemma_activation(j, name));
    TS_ASSIGN_OR_RETURN(double qpas, opt_num("query_pre_attn_scalar", c.head_dim));
    if (!(qpas > 0)) return invalid_argument(fmt::format("{}: query_pre_attn_scalar must be positive", name));
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(qpas));
    TS_ASSIGN_OR_RETURN(double asc, opt_num("attn_logit_softcapping", 0.0));
    TS_ASSIGN_OR_RETURN(double fsc, opt_num("final_logit_softcapping", 0.0));
    c.attn_softcap = static_cast<float>(asc);
    c.final_softcap = static_cast<float>(fsc);
    c.tied_embeddings = true;
  }
  if (c.arch == "gemma3") {
    TS_ASSIGN_OR_RETURN(double local, opt_num("rope_local_base_freq", 10000.0));
    c.rope_theta_sliding = static_cast<float>(local);
    TS_ASSIGN_OR_RETURN(c.sliding_pattern, int_key(j, "sliding_window_pattern", 6, name));
  }
  if (c.arch == "phi3") {
    TS_ASSIGN_OR_RETURN(double prf, opt_num("partial_rotary_factor", 1.0));
    if (prf != 1.0) return unimplemented(fmt::format("{}: partial_rotary_factor {} is not supported", name, prf));
  }
  if (c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "llama" || c.arch == "phi3") {
    if (j.contains("attention_bias") && j["attention_bias"] == true)
      return unimplemented(fmt::format("{}: attention_bias true is not supported for {}", name, c.arch));
  }
  if (auto sw = j.find("sliding_window"); sw != j.end() && !sw->is_null()) {
    if (!sw->is_number_integer() || sw->get<int64_t>() < 0 || sw->get<int64_t>() > (1 << 22))
      return invalid_argument(fmt::format("{}: sliding_window is not a valid integer", name));
    c.sliding_window = static_cast<int>(sw->get<int64_t>());
    // Qwen2/Qwen3 configs state a window that their use_sliding_window flag leaves off.
    if (j.contains("use_sliding_window") && j["use_sliding_window"] == false) c.sliding_window = 0;
    if ((c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "qwen3moe") && c.sliding_window > 0)
      return unimplemented(fmt::format("{}: use_sliding_window is not supported for {}", name, c.arch));
    if (c.sliding_window >= c.max_seq_len) c.sliding_window = 0;  // no position is ever outside it
  }
  if (auto lt = j.find("layer_types"); lt != j.end() && lt->is_array() && c.sliding_window > 0) {
    if (static_cast<int>(lt->size()) != c.n_layers)
      return invalid_argument(
          fmt::format("{}: layer_types has {} entries for {} layers", name, lt->size(), c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      const Json& e = (*lt)[static_cast<size_t>(l)];
      const bool sliding = e == "sliding_attention";
      if (!e.is_string() || (!sliding && e != "full_attention"))
        return unimplemented(fmt::format("{}: layer_types entry {} is not supported", name, e.dump()));
      if (sliding != c.is_sliding_layer(l))
        return unimplemented(fmt::format("{}: layer_types does not follow a sliding pattern of {} (layer {} differs)",
                                         name, c.sliding_pattern, l));
    }
  }
  return ok_status();
}

}  // namespace

Result<ModelConfig> parse_hf_config(std::string_view text, const std::string& name) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{} is not a JSON object", name));
  std::string arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch = (*a)[0].get<std::string>();
  if (is_bert_hf_architecture(arch)) return parse_bert_hf_config(text, name);
  if (hf::is_gemma4_architecture(arch)) return hf::parse_gemma4_config(j, name);
  if (hf::is_qwen35_architecture(arch)) return hf::parse_qwen35_config(j, arch, name);
  ModelConfig c;
  std::vector<std::string> known = hf::qwen35_architectures();
  known.insert(known.begin(), {"BertModel", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"});
  bool found = false;
  for (const HfArch& h : kHfArchs) {
    known.push_back(h.hf);
    if (arch == h.hf) {
      c.arch = h.arch;
      found = true;
    }
  }
  if (!found)
    return unimplemented(fmt::format("{}: architecture '{}' is not supported (supported: {})", name,
                                     arch.empty() ? "(none)" : arch, fmt::join(known, ", ")));
  TS_RETURN_IF_ERROR(apply_arch_features(c));
  TS_ASSIGN_OR_RETURN(c.dim, int_key(j, "hidden_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, int_key(j, "intermediate_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_layers, int_key(j, "num_hidden_layers", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_heads, int_key(j, "num_attention_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, int_key(j, "num_key_value_heads", c.n_heads, name));
  TS_ASSIGN_OR_RETURN(c.vocab_size, int_key(j, "vocab_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, int_key(j, "max_position_embeddings", 2048, name));
  if (c.n_heads <= 0) return invalid_argument(fmt::format("{}: num_attention_heads must be positive", name));
  TS_ASSIGN_OR_RETURN(c.head_dim, int_key(j, "head_dim", c.dim / c.n_heads, name));
  TS_ASSIGN_OR_RETURN(double theta, num_key(j, "rope_theta", 10000.0, name));
  TS_ASSIGN_OR_RETURN(double eps, num_key(j, "rms_norm_eps", 1e-6, name));
  c.rope_theta = static_cast<float>(theta);
  c.norm_eps = static_cast<float>(eps);
  auto tie = j.find("tie_word_embeddings");
  c.tied_embeddings = tie != j.end() && tie->is_boolean() ? tie->get<bool>() : false;
  if (c.post_norms) c.embedding_scale = std::sqrt(static_cast<float>(c.dim));  // Gemma
  TS_RETURN_IF_ERROR(parse_family(j, c, name));
  if (c.arch == "qwen3moe" || arch == "MixtralForCausalLM")
    TS_RETURN_IF_ERROR(hf::parse_moe_config(j, arch == "MixtralForCausalLM", c, name));
  if (c.arch == "gpt-oss") TS_RETURN_IF_ERROR(hf::parse_gpt_oss_config(j, c, name));
  TS_RETURN_IF_ERROR(parse_rope_scaling(j, c, name));
  if (Status s = c.validate(); !s.ok()) return s.with_context(name);
  return c;
}

Result<HfModel> load_hf_model(const std::string& dir) {
  fs::path d(dir);
  TS_ASSIGN_OR_RETURN(std::string cfg_text, read_file((d / "config.json").string()));
  HfModel m;
  TS_ASSIGN_OR_RETURN(m.config, parse_hf_config(cfg_text, (d / "config.json").string()));
  // The safetensors files: the shards named by the index, or the one model.safetensors.
  std::vector<std::string> files;
  std::error_code ec;
  fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    TS_ASSIGN_OR_RETURN(std::string text, read_file(index.string()));
    Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return invalid_argument(fmt::format("{}: no weight_map object", index.string()));
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return invalid_argument(fmt::format("{}: a weight_map entry is not a file name", index.string()));
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        return invalid_argument(fmt::format("{}: shard name '{}' must be a plain file name", index.string(), f));
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else if (fs::exists(d / "model.safetensors", ec)) {
    files.push_back("model.safetensors");
  } else {
    return not_found(
        fmt::format("{} has config.json but neither model.safetensors nor model.safetensors.index.json", dir));
  }
  auto storage = std::make_shared<Storage>();
  std::vector<WeightTensor> tensors;
  const bool gemma = m.config.arch == "gemma2" || m.config.arch == "gemma3";
  const bool qwen35 = m.config.arch == "qwen35" || m.config.arch == "qwen35moe";
  for (const std::string& f : files) {
    std::string path = (d / f).string();
    TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
    TS_ASSIGN_OR_RETURN(SafetensorsContents c, parse_safetensors(file->bytes(), path));
    storage->files.push_back(file);
    for (SafetensorsTensor& t : c.tensors) {
      std::optional<std::string> name = m.config.arch == "bert"     ? bert_gguf_name(t.name)
                                        : m.config.arch == "gemma4" ? hf::gemma4_gguf_name(t.name)
                                        : qwen35                    ? hf::qwen35_tensor_name(t.name)
                                                                    : to_gguf_name(t.name, gemma);
      if (!name) continue;
      tensors.push_back({*name, t.dtype, t.shape, t.data, t.bytes});
    }
  }
  const ModelConfig& c = m.config;
  const bool mixtral = c.arch == "llama" && c.has_moe_layers();
  if (c.arch == "gpt-oss") {
    TS_RETURN_IF_ERROR(hf::gpt_oss_experts_from_hf(tensors, c, storage->owned, dir));
  } else if (c.arch == "gemma4") {  // experts stacked as the engine keeps them already
    TS_RETURN_IF_ERROR(hf::gemma4_tensors_from_hf(tensors, c, cfg_text, storage->owned, dir));
  } else if (qwen35) {
    TS_RETURN_IF_ERROR(hf::qwen35_from_hf(tensors, c, storage->owned, dir));
  } else if (c.has_moe_layers()) {
    TS_RETURN_IF_ERROR(hf::stack_experts(tensors, c, mixtral, storage->owned, dir));
  }
  if (c.arch == "llama") {
    for (WeightTensor& t : tensors) {
      bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
      if (!q && !k) continue;
      int heads = q ? c.n_heads : c.n_kv_heads;
      if (t.shape.size() != 2 || t.shape[0] != static_cast<int64_t>(heads) * c.head_dim)
        return invalid_argument(fmt::format("{}: tensor {} has shape [{}], expected [{}, {}]", dir, t.name,
                                            fmt::join(t.shape, ", "), heads * c.head_dim, c.dim));
      storage->owned.push_back(permute_rope_rows(t.data, t.shape[0], t.bytes / static_cast<size_t>(t.shape[0]), heads,
                                                 /*to_interleaved=*/true));
      t.data = storage->owned.back().data();
    }
  }
  auto own_f32 = [&](std::vector<float> v) {
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    storage->owned.push_back(std::move(bytes));
    return storage->owned.back().data();
  };
  if (gemma) {
    // Gemma's RMSNorm multiplies by (1 + w); the engine (like GGUF) keeps the multiplier itself.
    for (WeightTensor& t : tensors) {
      if (!t.name.ends_with("norm.weight")) continue;
      TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(t));
      for (float& x : v) x += 1.0f;
      t.bytes = v.size() * sizeof(float);
      t.dtype = DType::kF32;
      t.data = own_f32(std::move(v));
    }
  }
  if (c.rope_scaling.type == RopeScalingType::kLongrope) {
    // config.json's factor lists become the tensors GGUF files carry (parse_hf_config checked their shape).
    Json j = Json::parse(cfg_text, nullptr, false);
    for (const auto& [key, tensor] : {std::pair{"long_factor", "rope_factors_long.weight"},
                                      std::pair{"short_factor", "rope_factors_short.weight"}}) {
      std::vector<float> v;
      for (const Json& x : j["rope_scaling"][key]) v.push_back(x.get<float>());
      const auto n = static_cast<int64_t>(v.size());
      tensors.push_back({tensor, DType::kF32, {n}, own_f32(std::move(v)), static_cast<size_t>(n) * sizeof(float)});
    }
  }
  m.weights = ModelWeights(storage);
  for (WeightTensor& t : tensors) m.weights.add(std::move(t));
  if (c.arch == "phi3") {
    for (int l = 0; l < c.n_layers; ++l) {
      const WeightTensor* qkv = m.weights.find(layer_tensor_name(l, "attn_qkv.weight"));
      const WeightTensor* gu = m.weights.find(layer_tensor_name(l, "ffn_gate_up.weight"));
      if (qkv == nullptr || gu == nullptr)
        return invalid_argument(fmt::format("{}: Phi-3 layer {} lacks qkv_proj or gate_up_proj", dir, l));
      TS_ASSIGN_OR_RETURN(auto a,
                          split_rows(*qkv,
                                     {layer_tensor_name(l, "attn_q.weight"), layer_tensor_name(l, "attn_k.weight"),
                                      layer_tensor_name(l, "attn_v.weight")},
                                     {c.q_dim(), c.kv_dim(), c.kv_dim()}));
      TS_ASSIGN_OR_RETURN(
          auto b, split_rows(*gu, {layer_tensor_name(l, "ffn_gate.weight"), layer_tensor_name(l, "ffn_up.weight")},
                             {c.hidden_dim, c.hidden_dim}));
      for (auto* parts : {&a, &b})
        for (WeightTensor& t : *parts) m.weights.add(std::move(t));
    }
  }
  if (!c.tied_embeddings && m.weights.find("output.weight") == nullptr)
    return invalid_argument(fmt::format("{}: tie_word_embeddings is false but lm_head.weight is missing", dir));
  if (c.tied_embeddings && m.weights.find("output.weight") != nullptr) {
    // A tied model that also stores lm_head (some exports do): the engine uses the embedding.
  }
  fs::path tok = d / "tokenizer.json";
  if (fs::exists(tok, ec)) {
    TS_ASSIGN_OR_RETURN(m.tokenizer, load_tokenizer(tok.string()));
  }
  TS_ASSIGN_OR_RETURN(m.embedding, read_sentence_transformers(dir));
  fs::path tcfg = d / "tokenizer_config.json";
  if (fs::exists(tcfg, ec)) {
    TS_ASSIGN_OR_RETURN(std::string text, read_file(tcfg.string()));
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("chat_template")) {
      const Json& t = j["chat_template"];
      if (t.is_string()) {
        m.chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const Json& e : t) {
          if (!e.is_object() || !e.contains("name") || !e.contains("template")) continue;
          if (e["name"] == "default" && e["template"].is_string()) m.chat_template = e["template"].get<std::string>();
          if (e["name"] == "tool_use" && e["template"].is_string())
            m.chat_template_tool_use = e["template"].get<std::string>();
        }
      }
    }
  }
  // transformers writes the template to its own file and reads that file first.
  fs::path jinja = d / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    TS_ASSIGN_OR_RETURN(m.chat_template, read_file(jinja.string()));
  }
  return m;
}

Status write_hf_model(const std::string& dir, const ModelConfig& c, const ModelWeights& weights,
                      const HfWriteOptions& options) {
  const bool gemma4 = c.arch == "gemma4";  // hf_gemma4.h: its own config keys and tensor names
  const bool qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe";
  const char* hf_arch = c.arch == "bert" ? "BertModel"
                        : gemma4         ? "Gemma4ForCausalLM"
                        : qwen35         ? hf::qwen35_hf_architecture(c)
                                         : nullptr;
  for (const HfArch& h : kHfArchs)
    if (hf_arch == nullptr && c.arch == h.arch) hf_arch = h.hf;
  const bool mixtral = c.arch == "llama" && c.has_moe_layers();
  if (mixtral) hf_arch = "MixtralForCausalLM";
  if (hf_arch == nullptr) {
    std::vector<std::string> known;
    for (const HfArch& h : kHfArchs)
      if (std::find(known.begin(), known.end(), h.arch) == known.end()) known.push_back(h.arch);
    known.insert(known.end(), {"gemma4", "qwen35", "qwen35moe"});
    return unimplemented(
        fmt::format("HF writing supports {}, not '{}' (write it as GGUF)", fmt::join(known, ", "), c.arch));
  }
  if (weights.find("rope_freqs.weight") != nullptr && c.rope_scaling.type != RopeScalingType::kLlama3 && !gemma4)
    return unimplemented(
        "rope_freqs.weight without its llama3 rope_scaling parameters cannot be written to config.json");
  const bool gemma = c.arch == "gemma2" || c.arch == "gemma3";
  // The rotary factor tensors live in config.json, not in the safetensors file.
  ModelWeights w;
  for (const WeightTensor& t : weights.tensors())
    if (!t.name.starts_with("rope_")) w.add(t);
  TS_ASSIGN_OR_RETURN(ExportedWeights ex,
                      export_weights(c, w, RopeLayout::kHalf, options.dtype, {DType::kF32, DType::kF16, DType::kBF16}));
  for (WeightTensor& t : ex.tensors) {
    if (!gemma || !t.name.ends_with("norm.weight")) continue;
    TS_ASSIGN_OR_RETURN(std::vector<float> v, tensor_to_f32(t));
    for (float& x : v) x -= 1.0f;  // Gemma stores (multiplier - 1)
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    ex.owned.push_back(std::move(bytes));
    t.dtype = DType::kF32;
    t.data = ex.owned.back().data();
    t.bytes = ex.owned.back().size();
  }
  if (c.arch == "phi3") {
    for (int l = 0; l < c.n_layers; ++l) {
      auto n = [l](const char* s) { return layer_tensor_name(l, s); };
      TS_RETURN_IF_ERROR(
          fuse_rows(ex, {n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight")}, n("attn_qkv.weight")));
      TS_RETURN_IF_ERROR(fuse_rows(ex, {n("ffn_gate.weight"), n("ffn_up.weight")}, n("ffn_gate_up.weight")));
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return unavailable(fmt::format("cannot create {}: {}", dir, ec.message()));
  fs::path d(dir);
  Json cfg;
  cfg["architectures"] = {hf_arch};
  cfg["model_type"] = c.arch == "gemma3"     ? "gemma3_text"
                      : c.arch == "qwen3moe" ? "qwen3_moe"
                      : mixtral              ? "mixtral"
                                             : c.arch;
  if (c.arch == "gpt-oss") {
    cfg["model_type"] = "gpt_oss";
    TS_RETURN_IF_ERROR(hf::write_gpt_oss_config(c, cfg));
    TS_RETURN_IF_ERROR(hf::gpt_oss_experts_to_hf(ex.tensors, c, ex.owned));
  } else if (qwen35) {
    TS_RETURN_IF_ERROR(hf::qwen35_to_hf(ex.tensors, c, ex.owned));
  } else if (c.has_moe_layers()) {
    TS_RETURN_IF_ERROR(hf::write_moe_config(c, mixtral, cfg));
  }
  cfg["hidden_size"] = c.dim;
  cfg["intermediate_size"] = c.hidden_dim;
  cfg["num_hidden_layers"] = c.n_layers;
  cfg["num_attention_heads"] = c.n_heads;
  cfg["num_key_value_heads"] = c.n_kv_heads;
  cfg["head_dim"] = c.head_dim;
  cfg["vocab_size"] = c.vocab_size;
  cfg["max_position_embeddings"] = c.max_seq_len;
  cfg["rope_theta"] = c.rope_theta;
  cfg["rms_norm_eps"] = c.norm_eps;
  cfg["tie_word_embeddings"] = c.tied_embeddings;
  cfg["hidden_act"] = c.gelu_mlp ? "gelu_pytorch_tanh" : "silu";
  if (gemma) {
    cfg["hidden_activation"] = "gelu_pytorch_tanh";
    const double qpas = c.attn_scale > 0.0f ? 1.0 / (static_cast<double>(c.attn_scale) * c.attn_scale) : c.head_dim;
    cfg["query_pre_attn_scalar"] = std::round(qpas);
    cfg["attn_logit_softcapping"] = c.attn_softcap > 0.0f ? Json(c.attn_softcap) : Json(nullptr);
    cfg["final_logit_softcapping"] = c.final_softcap > 0.0f ? Json(c.final_softcap) : Json(nullptr);
  } else if ((c.attn_softcap > 0.0f || c.final_softcap > 0.0f || c.attn_scale > 0.0f) && !gemma4) {
    return unimplemented(fmt::format("{} configs cannot state soft-capping or an attention scale", hf_arch));
  }
  if (c.arch == "gemma3") {
    cfg["rope_local_base_freq"] = c.rope_theta_sliding;
    cfg["sliding_window_pattern"] = c.sliding_pattern;
  }
  if (c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "llama" || c.arch == "phi3") cfg["attention_bias"] = false;
  cfg["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
  const RopeScaling& r = c.rope_scaling;
  switch (r.type) {
    case RopeScalingType::kNone:
      cfg["rope_scaling"] = nullptr;
      break;
    case RopeScalingType::kLinear:
      cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", r.factor}};
      break;
    case RopeScalingType::kLlama3:
      cfg["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", r.factor},
                             {"low_freq_factor", r.low_freq_factor},
                             {"high_freq_factor", r.high_freq_factor},
                             {"original_max_position_embeddings", r.original_context}};
      break;
    case RopeScalingType::kYarn:
      cfg["rope_scaling"] = {{"rope_type", "yarn"},          {"factor", r.factor},
                             {"beta_fast", r.beta_fast},     {"beta_slow", r.beta_slow},
                             {"attention_factor", r.mscale}, {"original_max_position_embeddings", r.original_context}};
      break;
    case RopeScalingType::kLongrope: {
      const WeightTensor* lf = weights.find("rope_factors_long.weight");
      const WeightTensor* sf = weights.find("rope_factors_short.weight");
      if (lf == nullptr || sf == nullptr)
        return invalid_argument("longrope scaling needs rope_factors_long.weight and rope_factors_short.weight");
      TS_ASSIGN_OR_RETURN(std::vector<float> lv, tensor_to_f32(*lf));
      TS_ASSIGN_OR_RETURN(std::vector<float> sv, tensor_to_f32(*sf));
      cfg["rope_scaling"] = {{"rope_type", "longrope"},
                             {"long_factor", lv},
                             {"short_factor", sv},
                             {"attention_factor", r.mscale},
                             {"factor", r.factor}};
      cfg["original_max_position_embeddings"] = r.original_context;
      break;
    }
  }
  if (qwen35) TS_RETURN_IF_ERROR(hf::write_qwen35_config(c, cfg));
  // The type the matrices are stored in (norms and other vectors may stay f32): the largest tensor's.
  DType stored = DType::kF32;
  size_t largest = 0;
  for (const WeightTensor& t : ex.tensors) {
    if (t.bytes > largest) {
      largest = t.bytes;
      stored = t.dtype;
    }
  }
  cfg["torch_dtype"] = stored == DType::kBF16 ? "bfloat16" : stored == DType::kF16 ? "float16" : "float32";
  if (c.arch == "bert") cfg = Json::parse(bert_hf_config_json(c, cfg["torch_dtype"].get<std::string>()));
  if (gemma4) {
    TS_ASSIGN_OR_RETURN(cfg, hf::gemma4_hf_config(c, weights, cfg["torch_dtype"].get<std::string>()));
  }
  if (options.embedding.matryoshka) {  // vLLM's keys
    if (options.embedding.matryoshka_dimensions.empty()) {
      cfg["is_matryoshka"] = true;
    } else {
      cfg["matryoshka_dimensions"] = options.embedding.matryoshka_dimensions;
    }
  }
  std::string cfg_text = cfg.dump(2) + "\n";
  TS_RETURN_IF_ERROR(write_file_atomic((d / "config.json").string(),
                                       {reinterpret_cast<const uint8_t*>(cfg_text.data()), cfg_text.size()}));
  std::vector<std::vector<SafetensorsTensor>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const WeightTensor& t : ex.tensors) {
    if (options.max_shard_bytes > 0 && shard_bytes > 0 && shard_bytes + t.bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    std::vector<WeightTensor> parts = {t};
    if (t.name.starts_with("blk.") && c.arch != "bert") {
      const size_t dot = t.name.find('.', 4);
      if (c.arch != "gpt-oss" && !gemma4)
        parts = hf::unstack_experts(t, std::stoi(t.name.substr(4, dot - 4)), t.name.substr(dot + 1), mixtral);
    }
    for (const WeightTensor& p : parts) {
      // Unstacked experts come named for transformers already; every other name (blk.*, token_embd, output_norm,
      // output) maps to transformers' own.
      const std::string hf_name = c.arch == "bert" ? bert_hf_name(p.name)
                                  : gemma4         ? hf::gemma4_hf_name(p.name)
                                                   : to_hf_name(p.name, gemma);
      shards.back().push_back({hf_name, p.dtype, p.shape, p.data, p.bytes});
    }
    shard_bytes += t.bytes;
    total += t.bytes;
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    TS_RETURN_IF_ERROR(write_safetensors((d / "model.safetensors").string(), shards[0], meta));
  } else {
    Json index;
    index["metadata"]["total_size"] = total;
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string f = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      TS_RETURN_IF_ERROR(write_safetensors((d / f).string(), shards[i], meta));
      for (const SafetensorsTensor& t : shards[i]) index["weight_map"][t.name] = f;
    }
    std::string text = index.dump(2) + "\n";
    TS_RETURN_IF_ERROR(write_file_atomic((d / "model.safetensors.index.json").string(),
                                         {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  }
  auto put = [&](const char* file, const std::string& text) -> Status {
    if (text.empty()) return ok_status();
    return write_file_atomic((d / file).string(), {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  };
  TS_RETURN_IF_ERROR(put("tokenizer.json", options.tokenizer_json));
  TS_RETURN_IF_ERROR(put("tokenizer_config.json", options.tokenizer_config_json));
  for (const auto& [file, text] : sentence_transformers_files(options.embedding)) {
    fs::create_directories((d / file).parent_path(), ec);
    if (ec) return unavailable(fmt::format("cannot create {}: {}", (d / file).parent_path().string(), ec.message()));
    if (!file.ends_with("/")) TS_RETURN_IF_ERROR(put(file.c_str(), text));
  }
  return ok_status();
}

}  // namespace tessera::model
