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

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::api {

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;              // 1: no nucleus cut
  int top_k = 0;                   // 0: no top-k cut
  uint64_t seed = 0;               // 0: not given (the sampler derives one from the clock)
  float min_p = 0.0f;              // 0: no min-p cut
  float presence_penalty = 0.0f;   // [-2, 2]: subtracted once from every token generated before
  float frequency_penalty = 0.0f;  // [-2, 2]: subtracted per occurrence
};

// InvalidArgument for a negative or non-finite temperature, top_p outside (0, 1], negative top_k, min_p
// outside [0, 1], a penalty outside [-2, 2].
Status validate(const SamplingParams& p);

// The sampling object of /internal/pd/prefill: every field, by its SamplingParams name.
nlohmann::json sampling_to_json(const SamplingParams& s);
// Reads it back as untrusted input (absent fields take their defaults); InvalidArgument naming the field.
Result<SamplingParams> sampling_from_json(const nlohmann::json& j);

}  // namespace tessera::api
