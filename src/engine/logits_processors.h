// LogitsProcessors: what one sequence's row of logits goes through before the sampler draws from it, in
// vLLM V1's order:
//   1. min_tokens: while fewer than min_tokens tokens were generated, the request's stop tokens (the model's
//      end-of-generation tokens unless ignore_eos, and stop_token_ids) get -inf, so they cannot be chosen;
//   2. logit_bias (OpenAI): the bias is added to the token's logit;
//   3. repetition_penalty (vLLM, Hugging Face): for every token of the prompt or generated so far, a positive
//      logit is divided by the penalty and a negative one multiplied by it;
//   4. frequency and presence penalties (OpenAI, over the generated tokens only): the logit loses
//      frequency_penalty per occurrence plus presence_penalty once.
// Logprobs reported to the client are computed from the processed row, before the temperature.
//
// Pure (values in, values out), so each rule is unit-tested on hand-made rows. Owned by one sequence (the
// engine thread); a copy serves another choice of the same request (n > 1), which shares the prompt.
#pragma once

#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "api/sampling.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

class LogitsProcessors {
 public:
  LogitsProcessors() = default;
  // `stop_tokens`: what min_tokens masks. The prompt is read only when repetition_penalty != 1.
  LogitsProcessors(const api::SamplingParams& params, std::span<const model::TokenId> prompt,
                   std::vector<model::TokenId> stop_tokens);

  // `counts`: generated token id -> occurrences; `generated`: tokens generated so far.
  void apply(std::span<float> logits, const std::unordered_map<model::TokenId, int>& counts, int generated) const;

  // Whether the stop checks (stop tokens ending the request, stop strings) apply after `generated` tokens.
  bool stops_allowed(int generated) const { return generated >= min_tokens_; }

 private:
  int min_tokens_ = 0;
  std::vector<model::TokenId> stop_tokens_;
  std::vector<std::pair<int32_t, float>> bias_;
  float repetition_ = 1.0f, frequency_ = 0.0f, presence_ = 0.0f;
  // The prompt's distinct tokens, sorted (repetition penalty); shared by the choices of one request.
  std::shared_ptr<const std::vector<model::TokenId>> prompt_set_;
};

}  // namespace tessera::engine
