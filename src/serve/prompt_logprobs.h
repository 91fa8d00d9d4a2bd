// The prompt's log-probabilities (engine::GenerationRequest::prompt_logprobs) in the two shapes clients read:
//  - vLLM's `prompt_logprobs`: one entry per prompt token, null for the first, else an object keyed by token id
//    (as a string) holding the prompt token and the top alternatives, each {"logprob", "rank", "decoded_token"};
//  - OpenAI's legacy completions `logprobs` with `echo`: the prompt's tokens come first in `tokens`,
//    `token_logprobs` (null for the first), `top_logprobs` (null for the first) and `text_offset`.
// Pure functions of the engine's output and the tokenizer.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::serve {

// `lps`: one entry per prompt position from 1 on (prompt.size() - 1 of them).
nlohmann::json vllm_prompt_logprobs(const std::vector<int32_t>& prompt, const std::vector<engine::TokenLogprobs>& lps,
                                    const model::Tokenizer& tokenizer);

// The four arrays of the prompt's part; `text_offset` is advanced past the prompt's text.
nlohmann::json echo_logprobs(const std::vector<int32_t>& prompt, const std::vector<engine::TokenLogprobs>& lps,
                             const model::Tokenizer& tokenizer, size_t& text_offset);

}  // namespace tessera::serve
