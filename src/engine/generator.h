// generate(): one prompt in, a stream of text pieces out, on a ModelRunner (the `tessera generate` path).
//
// The prompt is encoded with BOS and prefilled in one go; tokens are then sampled and fed back one at a
// time. Generation stops at BOS or EOS (neither is printed), after max_tokens new tokens, or when the
// model's context is full. With echo_prompt the prompt's own text is emitted first, as llama2.c's run.c
// prints it, so greedy output can be compared with the reference byte for byte.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/finish_reason.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

struct GenerateOptions {
  int max_tokens = 256;  // new tokens
  bool echo_prompt = true;
  SamplingParams sampling;
  std::vector<TokenId> end_of_generation;  // tokens that end the text; empty: the tokenizer's EOS and BOS
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // time spent in decode forward passes (generated_tokens - 1 of them)
  int decode_steps = 0;
  FinishReason finish = FinishReason::kLength;
};

// `on_text` receives each piece of output as soon as it exists.
Result<GenerateStats> generate(ModelRunner& runner, const model::Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options, const std::function<void(std::string_view)>& on_text);

}  // namespace tessera::engine
