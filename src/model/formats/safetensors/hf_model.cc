#include "model/formats/safetensors/hf_model.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/rope_permute.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/weight_export.h"

namespace tessera::model {
namespace fs = std::filesystem;
namespace {

using Json = nlohmann::json;

struct NamePair {
  const char* hf;
  const char* gguf;
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
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
};

// HF name -> GGUF name; nullopt for tensors the engine does not use (rotary caches).
std::optional<std::string> to_gguf_name(const std::string& hf) {
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
  for (const NamePair& p : kLayerNames)
    if (rest == p.hf) return "blk." + layer + "." + p.gguf;
  return hf;
}

std::string to_hf_name(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  if (gguf.rfind("blk.", 0) == 0) {
    size_t dot = gguf.find('.', 4);
    std::string layer = gguf.substr(4, dot - 4), rest = gguf.substr(dot + 1);
    for (const NamePair& p : kLayerNames)
      if (rest == p.gguf) return "model.layers." + layer + "." + p.hf;
  }
  return gguf;
}

Result<int> get_int(const Json& j, const char* key, std::optional<int> fallback, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return invalid_argument(fmt::format("{}: \"{}\" is missing", name, key));
  }
  if (!it->is_number_integer()) return invalid_argument(fmt::format("{}: \"{}\" is not an integer", name, key));
  int64_t v = it->get<int64_t>();
  if (v < 0 || v > (int64_t{1} << 30))
    return invalid_argument(fmt::format("{}: \"{}\" = {} is out of range", name, key, v));
  return static_cast<int>(v);
}

Result<double> get_num(const Json& j, const char* key, double fallback, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return invalid_argument(fmt::format("{}: \"{}\" is not a number", name, key));
  return it->get<double>();
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

Result<ModelConfig> parse_hf_config(std::string_view text, const std::string& name) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{} is not a JSON object", name));
  std::string arch;
  if (auto a = j.find("architectures"); a != j.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    arch = (*a)[0].get<std::string>();
  ModelConfig c;
  if (arch == "LlamaForCausalLM") {
    c.arch = "llama";
  } else if (arch == "Qwen2ForCausalLM") {
    c.arch = "qwen2";
  } else {
    return unimplemented(
        fmt::format("{}: architecture '{}' is not supported (supported: LlamaForCausalLM, Qwen2ForCausalLM)", name,
                    arch.empty() ? "(none)" : arch));
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null())
    return unimplemented(fmt::format("{}: rope_scaling is not supported", name));
  TS_ASSIGN_OR_RETURN(c.dim, get_int(j, "hidden_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.hidden_dim, get_int(j, "intermediate_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_layers, get_int(j, "num_hidden_layers", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_heads, get_int(j, "num_attention_heads", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, get_int(j, "num_key_value_heads", c.n_heads, name));
  TS_ASSIGN_OR_RETURN(c.vocab_size, get_int(j, "vocab_size", std::nullopt, name));
  TS_ASSIGN_OR_RETURN(c.max_seq_len, get_int(j, "max_position_embeddings", 2048, name));
  if (c.n_heads <= 0) return invalid_argument(fmt::format("{}: num_attention_heads must be positive", name));
  TS_ASSIGN_OR_RETURN(c.head_dim, get_int(j, "head_dim", c.dim / c.n_heads, name));
  TS_ASSIGN_OR_RETURN(double theta, get_num(j, "rope_theta", 10000.0, name));
  TS_ASSIGN_OR_RETURN(double eps, get_num(j, "rms_norm_eps", 1e-6, name));
  c.rope_theta = static_cast<float>(theta);
  c.norm_eps = static_cast<float>(eps);
  auto tie = j.find("tie_word_embeddings");
  c.tied_embeddings = tie != j.end() && tie->is_boolean() ? tie->get<bool>() : c.arch == "llama" ? false : false;
  c.rope_layout = c.arch == "llama" ? RopeLayout::kInterleaved : RopeLayout::kHalf;
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
  for (const std::string& f : files) {
    std::string path = (d / f).string();
    TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
    TS_ASSIGN_OR_RETURN(SafetensorsContents c, parse_safetensors(file->bytes(), path));
    storage->files.push_back(file);
    for (SafetensorsTensor& t : c.tensors) {
      std::optional<std::string> name = to_gguf_name(t.name);
      if (!name) continue;
      tensors.push_back({*name, t.dtype, t.shape, t.data, t.bytes});
    }
  }
  const ModelConfig& c = m.config;
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
  m.weights = ModelWeights(storage);
  for (WeightTensor& t : tensors) m.weights.add(std::move(t));
  if (!c.tied_embeddings && m.weights.find("output.weight") == nullptr)
    return invalid_argument(fmt::format("{}: tie_word_embeddings is false but lm_head.weight is missing", dir));
  if (c.tied_embeddings && m.weights.find("output.weight") != nullptr) {
    // A tied model that also stores lm_head (some exports do): the engine uses the embedding.
  }
  fs::path tok = d / "tokenizer.json";
  if (fs::exists(tok, ec)) {
    TS_ASSIGN_OR_RETURN(auto t, BpeTokenizer::load(tok.string()));
    m.tokenizer = std::move(t);
  }
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
  if (c.arch != "llama" && c.arch != "qwen2")
    return unimplemented(fmt::format("HF writing supports llama and qwen2, not '{}'", c.arch));
  TS_ASSIGN_OR_RETURN(ExportedWeights ex, export_weights(c, weights, RopeLayout::kHalf, options.dtype,
                                                         {DType::kF32, DType::kF16, DType::kBF16}));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return unavailable(fmt::format("cannot create {}: {}", dir, ec.message()));
  fs::path d(dir);
  Json cfg;
  cfg["architectures"] = {c.arch == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM"};
  cfg["model_type"] = c.arch;
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
  cfg["hidden_act"] = "silu";
  cfg["torch_dtype"] = ex.tensors.size() > 1 && ex.tensors[1].dtype == DType::kBF16  ? "bfloat16"
                       : ex.tensors.size() > 1 && ex.tensors[1].dtype == DType::kF16 ? "float16"
                                                                                     : "float32";
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
    shards.back().push_back({to_hf_name(t.name), t.dtype, t.shape, t.data, t.bytes});
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
  return ok_status();
}

}  // namespace tessera::model
