// load_model: from what a user types (--model PATH [--tokenizer PATH]) to a config, weights and tokenizer.
//
// PATH may be
//  - a GGUF file (its embedded tokenizer is used unless --tokenizer is given);
//  - a Hugging Face folder (config.json + safetensors, tokenizer.json when present);
//  - a llama2.c checkpoint file (then --tokenizer is needed);
//  - a directory holding exactly one checkpoint (GGUF or llama2.c) and, for llama2.c, exactly one tokenizer.
// Files are recognised by content, not by name. --tokenizer accepts any file load_tokenizer() reads. The
// tokenizer may not have more tokens than the model's vocabulary (HF models pad their embedding).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/generation_defaults.h"
#include "model/model_config.h"
#include "model/pooling.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

struct LoadedModel {
  std::string name;  // file stem of the checkpoint ("stories260K"): the id servers report
  std::string checkpoint_path;
  std::string tokenizer_path;          // the file the tokenizer came from (the checkpoint itself when embedded)
  std::string format;                  // "llama2c", "gguf", "safetensors"
  std::string chat_template;           // from the GGUF file, chat_template.jinja or tokenizer_config.json, when present
  std::string chat_template_tool_use;  // the model's named "tool_use" template, when present
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  // Sampling defaults (GGUF metadata, generation_config.json) and the tokens that end generation, for the
  // tokenizer actually used (see model/generation_defaults.h); end_of_generation is empty only without one.
  GenerationDefaults generation;
  // What the files say about serving it as an embedding model (model/pooling.h): GGUF {arch}.pooling_type with
  // L2 normalisation, or sentence-transformers' modules.json and config.json's matryoshka keys.
  EmbeddingSpec embedding;
};

// With require_tokenizer false, a model without one loads with a null tokenizer (for inspect / convert).
Result<LoadedModel> load_model(const std::string& model_path, const std::string& tokenizer_path = "",
                               bool require_tokenizer = true);

}  // namespace tessera::model
