// The sampling, batching and reasoning fields of the OpenAI / vLLM request (parse_request in openai.cc calls
// these): `n`, `seed`, `logit_bias`, `repetition_penalty`, `min_tokens`, `prompt_logprobs`, a list of prompts
// in /v1/completions, and chat's `chat_template_kwargs` and `reasoning_effort`. Each returns the 400 naming
// the field, or nothing when the body is acceptable.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "api/openai.h"

namespace tessera::api::internal {

// `prompt` of /v1/completions: a string, a list of token ids, or a list of either (several prompts).
std::optional<ApiError> parse_prompts(const nlohmann::json& prompt, ApiRequest& r);

// n, seed, logit_bias, repetition_penalty, min_tokens, prompt_logprobs (and completions' echo with logprobs).
std::optional<ApiError> parse_sampling_fields(const nlohmann::json& body, ApiRequest& r);

// chat_template_kwargs (an object whose keys are not the template's own variables) and reasoning_effort.
std::optional<ApiError> parse_chat_template_fields(const nlohmann::json& body, ApiRequest& r);

}  // namespace tessera::api::internal
