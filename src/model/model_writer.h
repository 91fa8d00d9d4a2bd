// write_model: one entry point for writing a model in any format Tessera writes (used by `tessera synth`
// and `tessera convert`).
//
// Formats: "llama2c" (f32, interleaved rotary, llama only), "gguf" (any of f32/f16/bf16/q8_0/q4_0, with the
// tokenizer's vocabulary embedded when it has one), "safetensors" (a Hugging Face folder: config.json +
// model.safetensors, sharded when max_shard_bytes is set, f32/f16/bf16).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/pooling.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

struct ModelWriteOptions {
  std::optional<DType> dtype;            // matrices; nullopt keeps each tensor's type where the format allows
  const Tokenizer* tokenizer = nullptr;  // GGUF: embedded when it exports a vocabulary
  std::string name;
  std::string chat_template;
  uint64_t max_shard_bytes = 0;               // safetensors only
  std::string tokenizer_json;                 // safetensors: written as tokenizer.json when not empty
  std::string tokenizer_config_json;          // safetensors: written as tokenizer_config.json when not empty
  std::vector<std::string>* notes = nullptr;  // what was changed on the way (type fallbacks, skipped parts)
  // An embedding model: GGUF {arch}.pooling_type; safetensors: sentence-transformers' files and matryoshka keys.
  EmbeddingSpec embedding;
  // GGUF: whether the embedded vocabulary appends EOS (tokenizer.ggml.add_eos_token), when the tokenizer's own
  // vocabulary cannot say (Qwen3-Embedding's tokenizer appends <|endoftext|>).
  std::optional<bool> vocab_add_eos;
};

std::vector<std::string> model_format_names();
// "gguf" for *.gguf, "llama2c" for *.bin, otherwise "safetensors" (a folder).
std::string model_format_for_path(const std::string& path);

Status write_model(const std::string& format, const std::string& path, const ModelConfig& config,
                   const ModelWeights& weights, const ModelWriteOptions& options);

}  // namespace tessera::model
