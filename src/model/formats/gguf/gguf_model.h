// Models in GGUF files: llama.cpp's `llama` and `qwen2` architectures, their metadata keys and the
// embedded tokenizer (`tokenizer.ggml.*`).
//
// Reading: the config comes from `{arch}.context_length`, `.embedding_length`, `.block_count`,
// `.feed_forward_length`, `.attention.head_count`, `.attention.head_count_kv`, `.rope.freq_base`,
// `.rope.dimension_count` and `.attention.layer_norm_rms_epsilon`; tensors keep their GGUF names (the
// engine's names) and point into the mapped file. Rotary layout follows llama.cpp: `llama` tensors are
// interleaved (its HF converter permutes Q/K rows), `qwen2` tensors rotate halves.
//
// Writing: the model's tensors in canonical order, Q/K permuted into the architecture's layout, matrices
// optionally converted to f16/bf16/q8_0/q4_0, plus the vocabulary when one is given.
//
// bert (encoder) files carry what llama.cpp's converter writes for BertModel: `.attention.layer_norm_epsilon`,
// `.attention.causal` false, `.pooling_type`, `tokenizer.ggml.token_type_count`, no rotary keys, and the
// tensors token_embd, position_embd, token_types, token_embd_norm.{weight,bias}, blk.N.attn_{q,k,v,output}
// .{weight,bias}, blk.N.attn_output_norm, blk.N.ffn_up / ffn_down .{weight,bias}, blk.N.layer_output_norm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/generation_defaults.h"
#include "model/model_config.h"
#include "model/pooling.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"
#include "model/weights.h"

namespace tessera::model {

struct GgufModel {
  ModelConfig config;
  ModelWeights weights;
  std::optional<Vocab> vocab;                // when the file embeds a tokenizer
  std::unique_ptr<Tokenizer> tokenizer;      // built from `vocab`
  std::string chat_template;                 // tokenizer.chat_template, when present
  std::string chat_template_tool_use;        // tokenizer.chat_template.tool_use, when present
  std::string name;                          // general.name, when present
  GenerationDefaults generation;             // general.sampling.* (end_of_generation: left to the loader)
  PoolingType pooling = PoolingType::kNone;  // {arch}.pooling_type: an embedding model's pooling
};

// Cheap check of the magic.
bool looks_like_gguf(const std::string& path);

Result<GgufModel> load_gguf_model(const std::string& path);
// The same from bytes already in memory (`keep_alive` owns them; tests and the fuzzer pass nullptr and
// keep the bytes alive themselves).
Result<GgufModel> parse_gguf_model(std::span<const uint8_t> bytes, const std::string& name,
                                   std::shared_ptr<const void> keep_alive);

struct GgufWriteOptions {
  std::optional<DType> matrix_dtype;          // nullopt: keep each tensor's type
  std::string name;                           // general.name
  std::string chat_template;                  // tokenizer.chat_template (empty: not written)
  std::vector<std::string>* notes = nullptr;  // receives type fallbacks
  PoolingType pooling = PoolingType::kNone;   // written as {arch}.pooling_type when not none (embedding models)
};

Status write_gguf_model(const std::string& path, const ModelConfig& config, const ModelWeights& weights,
                        const Vocab* vocab, const GgufWriteOptions& options);

}  // namespace tessera::model
