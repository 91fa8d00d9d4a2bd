// Sampling parameters: the one definition of how a request wants its next token chosen. The public API
// parses them (api/openai.h), a decode node forwards them to its prefill node (api/pd_messages.h), and the
// engine's Sampler consumes them (engine/sampler.h); all three read this struct, so a new knob is added once.
//
// The bounds in validate() and in the JSON reader are the public API's: a peer cannot ask for what a client
// may not.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::api {

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;              // 1: no nucleus cut
  int top_k = 0;                   // 0: no top-k cut
  std::optional<uint64_t> seed;    // not given: a random seed; 0 is a seed like any other
  float min_p = 0.0f;              // 0: no min-p cut
  float presence_penalty = 0.0f;   // [-2, 2]: subtracted once from every token generated before
  float frequency_penalty = 0.0f;  // [-2, 2]: subtracted per occurrence
  // (0, kMaxRepetitionPenalty]: vLLM's and Hugging Face's rule over the prompt and the generated tokens: a
  // positive logit of a token seen before is divided by it, a negative one multiplied. 1: off.
  float repetition_penalty = 1.0f;
  // OpenAI's logit_bias: added to the token's logit before sampling, each in [-100, 100]; sorted by token id,
  // one entry per id. Token ids are checked against the vocabulary by the engine.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The request's stop tokens (end of generation unless ignore_eos, and stop_token_ids) cannot be chosen before
  // this many tokens were generated, and stop strings do not end it before then (vLLM's min_tokens).
  int min_tokens = 0;
};

inline constexpr float kMaxRepetitionPenalty = 10.0f;
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr size_t kMaxLogitBiasEntries = 1u << 18;  // the largest vocabularies served (262144)

// InvalidArgument for a negative or non-finite temperature, top_p outside (0, 1], negative top_k, min_p
// outside [0, 1], a penalty outside [-2, 2], a repetition penalty outside (0, 10], a bias outside [-100, 100],
// unsorted or repeated bias ids, a negative min_tokens.
Status validate(const SamplingParams& p);

// The sampling object of /internal/pd/prefill: every field, by its SamplingParams name.
nlohmann::json sampling_to_json(const SamplingParams& s);
// Reads it back as untrusted input (absent fields take their defaults); InvalidArgument naming the field.
Result<SamplingParams> sampling_from_json(const nlohmann::json& j);

}  // namespace tessera::api
