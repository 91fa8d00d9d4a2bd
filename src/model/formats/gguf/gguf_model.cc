#include "model/formats/gguf/gguf_model.h"

#include <cstring>
#include <fstream>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_file.h"
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
  if (*arch != "llama" && *arch != "qwen2")
    return unimplemented(fmt::format("{}: GGUF architecture '{}' is not supported (llama, qwen2 are)", name, *arch));
  ModelConfig& cfg = m.config;
  cfg.arch = *arch;
  const std::string& a = *arch;
  Status st = [&]() -> Status {
    TS_ASSIGN_OR_RETURN(cfg.dim, get_dim(c, a + ".embedding_length"));
    TS_ASSIGN_OR_RETURN(cfg.hidden_dim, get_dim(c, a + ".feed_forward_length"));
    TS_ASSIGN_OR_RETURN(cfg.n_layers, get_dim(c, a + ".block_count"));
    TS_ASSIGN_OR_RETURN(cfg.n_heads, get_dim(c, a + ".attention.head_count"));
    TS_ASSIGN_OR_RETURN(cfg.n_kv_heads, get_dim_or(c, a + ".attention.head_count_kv", cfg.n_heads));
    TS_ASSIGN_OR_RETURN(cfg.max_seq_len, get_dim(c, a + ".context_length"));
    if (cfg.n_heads <= 0) return invalid_argument("attention.head_count must be positive");
    TS_ASSIGN_OR_RETURN(cfg.head_dim, get_dim_or(c, a + ".attention.key_length", cfg.dim / cfg.n_heads));
    TS_ASSIGN_OR_RETURN(int rope_dims, get_dim_or(c, a + ".rope.dimension_count", cfg.head_dim));
    if (rope_dims != cfg.head_dim)
      return unimplemented(
          fmt::format("partial rotary embedding ({} of {} dimensions) is not supported", rope_dims, cfg.head_dim));
    if (c.find(a + ".rope.freq_base")) {
      TS_ASSIGN_OR_RETURN(double theta, c.get_float(a + ".rope.freq_base"));
      cfg.rope_theta = static_cast<float>(theta);
    }
    if (c.find(a + ".attention.layer_norm_rms_epsilon")) {
      TS_ASSIGN_OR_RETURN(double eps, c.get_float(a + ".attention.layer_norm_rms_epsilon"));
      cfg.norm_eps = static_cast<float>(eps);
    }
    return ok_status();
  }();
  if (!st.ok()) return ctx(st);
  cfg.rope_layout = a == "llama" ? RopeLayout::kInterleaved : RopeLayout::kHalf;
  m.weights = ModelWeights(std::move(keep_alive));
  for (const GgufTensor& t : c.tensors) m.weights.add({t.name, t.dtype, t.shape(), t.data, t.bytes});
  const WeightTensor* emb = m.weights.find("token_embd.weight");
  if (!emb || emb->shape.size() != 2) return invalid_argument(fmt::format("{}: no 2-D token_embd.weight", name));
  cfg.vocab_size = static_cast<int>(emb->shape[0]);
  cfg.tied_embeddings = m.weights.find("output.weight") == nullptr;
  if (Status s = cfg.validate(); !s.ok()) return ctx(s);
  if (c.find("general.name")) {
    auto n = c.get_string("general.name");
    if (n.ok()) m.name = *n;
  }
  if (c.find("tokenizer.chat_template")) {
    auto t = c.get_string("tokenizer.chat_template");
    if (t.ok()) m.chat_template = *t;
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

Status write_gguf_model(const std::string& path, const ModelConfig& config, const ModelWeights& weights,
                        const Vocab* vocab, const GgufWriteOptions& options) {
  if (config.arch != "llama" && config.arch != "qwen2")
    return unimplemented(fmt::format("GGUF writing supports llama and qwen2, not '{}'", config.arch));
  const bool has_bias = weights.find("blk.0.attn_q.bias") != nullptr;
  if (config.arch == "llama" && has_bias)
    return invalid_argument("a llama model has no q/k/v biases; write it as qwen2");
  RopeLayout layout = config.arch == "llama" ? RopeLayout::kInterleaved : RopeLayout::kHalf;
  TS_ASSIGN_OR_RETURN(ExportedWeights ex, export_weights(config, weights, layout, options.matrix_dtype,
                                                         {all_dtypes().begin(), all_dtypes().end()}));
  if (options.notes) options.notes->insert(options.notes->end(), ex.notes.begin(), ex.notes.end());

  const std::string& a = config.arch;
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", GgufValue::str(a));
  if (!options.name.empty()) kv.emplace_back("general.name", GgufValue::str(options.name));
  kv.emplace_back("general.alignment", GgufValue::u32(32));
  kv.emplace_back(a + ".context_length", GgufValue::u32(static_cast<uint32_t>(config.max_seq_len)));
  kv.emplace_back(a + ".embedding_length", GgufValue::u32(static_cast<uint32_t>(config.dim)));
  kv.emplace_back(a + ".block_count", GgufValue::u32(static_cast<uint32_t>(config.n_layers)));
  kv.emplace_back(a + ".feed_forward_length", GgufValue::u32(static_cast<uint32_t>(config.hidden_dim)));
  kv.emplace_back(a + ".attention.head_count", GgufValue::u32(static_cast<uint32_t>(config.n_heads)));
  kv.emplace_back(a + ".attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(config.n_kv_heads)));
  if (config.head_dim * config.n_heads != config.dim) {
    kv.emplace_back(a + ".attention.key_length", GgufValue::u32(static_cast<uint32_t>(config.head_dim)));
    kv.emplace_back(a + ".attention.value_length", GgufValue::u32(static_cast<uint32_t>(config.head_dim)));
  }
  kv.emplace_back(a + ".rope.dimension_count", GgufValue::u32(static_cast<uint32_t>(config.head_dim)));
  kv.emplace_back(a + ".rope.freq_base", GgufValue::f32(config.rope_theta));
  kv.emplace_back(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(config.norm_eps));
  kv.emplace_back(a + ".vocab_size", GgufValue::u32(static_cast<uint32_t>(config.vocab_size)));
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
    if (!vocab->types.empty()) kv.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(vocab->types));
    if (!vocab->merges.empty()) kv.emplace_back("tokenizer.ggml.merges", GgufValue::string_array(vocab->merges));
    auto put_id = [&](const char* key, TokenId id) {
      if (id >= 0) kv.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(id)));
    };
    put_id("tokenizer.ggml.bos_token_id", vocab->bos);
    put_id("tokenizer.ggml.eos_token_id", vocab->eos);
    put_id("tokenizer.ggml.unknown_token_id", vocab->unk);
    put_id("tokenizer.ggml.padding_token_id", vocab->pad);
    kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(vocab->add_bos));
    if (vocab->kind == VocabKind::kSentencePiece)
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
