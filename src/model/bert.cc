#include "model/bert.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/formats/safetensors/hf_json.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;
using hf::int_key;

struct Pair {
  const char* hf;
  const char* gguf;
};
constexpr Pair kTop[] = {
    {"embeddings.word_embeddings.weight", "token_embd.weight"},
    {"embeddings.position_embeddings.weight", "position_embd.weight"},
    {"embeddings.token_type_embeddings.weight", "token_types.weight"},
    {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
    {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
};
constexpr Pair kLayer[] = {
    {"attention.self.query.weight", "attn_q.weight"},
    {"attention.self.query.bias", "attn_q.bias"},
    {"attention.self.key.weight", "attn_k.weight"},
    {"attention.self.key.bias", "attn_k.bias"},
    {"attention.self.value.weight", "attn_v.weight"},
    {"attention.self.value.bias", "attn_v.bias"},
    {"attention.output.dense.weight", "attn_output.weight"},
    {"attention.output.dense.bias", "attn_output.bias"},
    {"attention.output.LayerNorm.weight", "attn_output_norm.weight"},
    {"attention.output.LayerNorm.bias", "attn_output_norm.bias"},
    {"intermediate.dense.weight", "ffn_up.weight"},
    {"intermediate.dense.bias", "ffn_up.bias"},
    {"output.dense.weight", "ffn_down.weight"},
    {"output.dense.bias", "ffn_down.bias"},
    {"output.LayerNorm.weight", "layer_output_norm.weight"},
    {"output.LayerNorm.bias", "layer_output_norm.bias"},
};

}  // namespace

std::vector<std::string> bert_tensor_names(const ModelConfig& c) {
  std::vector<std::string> out;
  for (const Pair& p : kTop) out.push_back(p.gguf);
  for (int l = 0; l < c.n_layers; ++l)
    for (const Pair& p : kLayer) out.push_back(fmt::format("blk.{}.{}", l, p.gguf));
  return out;
}

bool is_bert_hf_architecture(std::string_view a) {
  return a == "BertModel" || a == "BertForMaskedLM" || a == "BertForPreTraining" ||
         a == "BertForSequenceClassification";
}

std::optional<std::string> bert_gguf_name(const std::string& hf_in) {
  std::string hf = hf_in;
  if (hf.starts_with("bert.")) hf = hf.substr(5);
  if (hf.ends_with(".gamma")) hf = hf.substr(0, hf.size() - 6) + ".weight";
  if (hf.ends_with(".beta")) hf = hf.substr(0, hf.size() - 5) + ".bias";
  if (hf == "embeddings.position_ids" || hf.starts_with("pooler.") || hf.starts_with("cls.")) return std::nullopt;
  for (const Pair& p : kTop)
    if (hf == p.hf) return std::string(p.gguf);
  constexpr std::string_view kPrefix = "encoder.layer.";
  if (hf.starts_with(kPrefix)) {
    const size_t dot = hf.find('.', kPrefix.size());
    if (dot != std::string::npos) {
      const std::string layer = hf.substr(kPrefix.size(), dot - kPrefix.size());
      const std::string rest = hf.substr(dot + 1);
      for (const Pair& p : kLayer)
        if (rest == p.hf) return "blk." + layer + "." + p.gguf;
    }
  }
  return hf_in;
}

std::string bert_hf_name(const std::string& gguf) {
  for (const Pair& p : kTop)
    if (gguf == p.gguf) return p.hf;
  if (gguf.starts_with("blk.")) {
    const size_t dot = gguf.find('.', 4);
    const std::string layer = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
    for (const Pair& p : kLayer)
      if (rest == p.gguf) return "encoder.layer." + layer + "." + p.hf;
  }
  return gguf;
}

Result<ModelConfig> parse_bert_hf_config(std::string_view text, const std::string& name) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{} is not a JSON object", name));
  ModelConfig c;
  c.arch = "bert";
  TS_RETURN_IF_ERROR(apply_arch_features(c));
  TS_ASSIGN_OR_RETURN(c.dim, int_key(j, "hidden_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, int_key(j, "intermediate_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_layers, int_key(j, "num_hidden_layers", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_heads, int_key(j, "num_attention_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.vocab_size, int_key(j, "vocab_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, int_key(j, "max_position_embeddings", 512, name));
  TS_ASSIGN_OR_RETURN(c.n_token_types, int_key(j, "type_vocab_size", 2, name));
  if (c.n_heads <= 0 || c.dim % c.n_heads != 0)
    return invalid_argument(
        fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}", name, c.dim, c.n_heads));
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.dim / c.n_heads;
  const Json eps = j.value("layer_norm_eps", Json(1e-12));
  if (!eps.is_number()) return invalid_argument(fmt::format("{}: layer_norm_eps is not a number", name));
  c.norm_eps = eps.get<float>();
  const std::string act = j.value("hidden_act", std::string("gelu"));
  if (act != "gelu")
    return unimplemented(fmt::format("{}: hidden_act '{}' is not supported for bert (gelu is)", name, act));
  const std::string pos = j.value("position_embedding_type", std::string("absolute"));
  if (pos != "absolute")
    return unimplemented(fmt::format("{}: position_embedding_type '{}' is not supported (absolute is)", name, pos));
  c.tied_embeddings = true;  // no classifier at all
  if (Status s = c.validate(); !s.ok()) return s.with_context(name);
  return c;
}

std::string bert_hf_config_json(const ModelConfig& c, std::string_view torch_dtype) {
  Json cfg = {{"architectures", {"BertModel"}},
              {"model_type", "bert"},
              {"hidden_size", c.dim},
              {"intermediate_size", c.hidden_dim},
              {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_heads},
              {"max_position_embeddings", c.max_seq_len},
              {"vocab_size", c.vocab_size},
              {"type_vocab_size", c.n_token_types},
              {"layer_norm_eps", c.norm_eps},
              {"hidden_act", "gelu"},
              {"position_embedding_type", "absolute"},
              {"pad_token_id", 0},
              {"torch_dtype", torch_dtype}};
  return cfg.dump(2) + "\n";
}

}  // namespace tessera::model
