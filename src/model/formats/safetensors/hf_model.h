// Hugging Face model folders: config.json + model.safetensors (or shards listed in
// model.safetensors.index.json) + tokenizer.json / tokenizer_config.json.
//
// Architectures: the decoder families of model_config.h and BertModel (model/bert.h); sentence-transformers'
// modules.json and pooling config describe an embedding model (model/pooling.h). HF names map to the engine's GGUF
// names (model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, ...).
//
// Rotary layout: HF checkpoints rotate halves. Qwen2 keeps that layout (config.rope_layout = kHalf, as
// llama.cpp's qwen2). Llama's Q/K rows are permuted to the interleaved layout at load, exactly as
// llama.cpp's converter does, so a Llama model reads the same from llama2.c, GGUF and HF files; the writer
// permutes them back.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/pooling.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

struct HfModel {
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer.json
  std::string chat_template;             // chat_template.jinja, else tokenizer_config.json's chat_template
  std::string chat_template_tool_use;    // its named "tool_use" template, when present
  EmbeddingSpec embedding;               // sentence-transformers' pooling (modules.json) and matryoshka keys
};

// Does `dir` hold a config.json?
bool looks_like_hf_folder(const std::string& dir);

// The config alone (InvalidArgument / Unimplemented for unsupported architectures or settings).
Result<ModelConfig> parse_hf_config(std::string_view config_json, const std::string& name);

Result<HfModel> load_hf_model(const std::string& dir);

struct HfWriteOptions {
  std::optional<DType> dtype;    // f32, f16 or bf16 for matrices (nullopt: keep, f32 where needed)
  uint64_t max_shard_bytes = 0;  // > 0: split into shards of at most this size plus an index
  std::string tokenizer_json;    // written as tokenizer.json when not empty
  std::string tokenizer_config_json;
  EmbeddingSpec embedding;  // declared: modules.json, 1_Pooling/config.json (2_Normalize) and matryoshka keys
};

// Writes config.json and the safetensors file(s) into `dir` (created if needed).
Status write_hf_model(const std::string& dir, const ModelConfig& config, const ModelWeights& weights,
                      const HfWriteOptions& options);

}  // namespace tessera::model
