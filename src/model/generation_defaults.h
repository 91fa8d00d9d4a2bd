// GenerationDefaults: what a model's own files say about generating from it, beyond its weights: the
// tokens that end generation and the sampling settings its authors recommend.
//
// Sources, as the reference engines read them:
//  - GGUF: `general.sampling.temp` / `.top_p` / `.top_k` / `.min_p` (what llama.cpp's converter writes from
//    generation_config.json); end of generation = EOS plus the tokens llama.cpp recognises by their text
//    (<|eot_id|>, <|end_of_text|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, ...), as
//    its vocabulary loader does, so both engines stop at the same token;
//  - Hugging Face folders: generation_config.json (`temperature`, `top_p`, `top_k`, `min_p`, taken as vLLM
//    takes them, whatever `do_sample` says; `eos_token_id` as an id or a list: Llama 3's [128001, 128008,
//    128009]) plus the tokenizer's EOS and the spellings above;
//  - llama.cpp checkpoints: EOS and BOS (llama2.c's run.c ends a story at BOS).
// A request's own fields override the sampling defaults.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

struct GgufContents;

struct GenerationDefaults {
  std::vector<TokenId> end_of_generation;  // empty: the tokenizer's EOS (and BOS)
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::string source;  // "generation_config.json", "GGUF metadata" or "" (nothing stated)
};

// generation_config.json's text (InvalidArgument naming the key for wrong types); ids outside [0, vocab) are
// refused too.
Result<GenerationDefaults> parse_generation_config(std::string_view json_text, int vocab_size);
// The sampling keys of a GGUF file (end_of_generation left empty).
Result<GenerationDefaults> read_gguf_sampling(const GgufContents& file);
// llama.cpp's end-of-generation list for a vocabulary: EOS plus the special tokens spelled as its loader
// looks for (see the header comment), in ascending id order.
std::vector<TokenId> vocab_end_of_generation(const Tokenizer& tokenizer);

}  // namespace tessera::model
