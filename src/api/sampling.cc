#include "api/sampling.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_fields.h"

namespace tessera::api {

using json = nlohmann::json;

Status validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return invalid_argument(fmt::format("temperature must be a finite number >= 0, got {}", p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return invalid_argument(fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (p.top_k < 0) return invalid_argument(fmt::format("top_k must be >= 0, got {}", p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return invalid_argument(fmt::format("min_p must be in [0, 1], got {}", p.min_p));
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return invalid_argument(fmt::format("presence_penalty must be in [-2, 2], got {}", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return invalid_argument(fmt::format("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty));
  }
  return ok_status();
}

json sampling_to_json(const SamplingParams& s) {
  return {{"temperature", s.temperature},
          {"top_p", s.top_p},
          {"top_k", s.top_k},
          {"min_p", s.min_p},
          {"seed", s.seed},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty}};
}

Result<SamplingParams> sampling_from_json(const json& j) {
  // The same bounds as the public API (openai.cc), so a peer cannot ask for what a client may not.
  JsonFields f(j, "sampling");
  SamplingParams s;
  s.temperature = static_cast<float>(f.number("temperature", 0, 2, 1.0));
  s.top_p = static_cast<float>(f.number("top_p", 0, 1, 1.0));
  s.top_k = static_cast<int>(f.integer("top_k", 0, 1 << 20, 0));
  s.min_p = static_cast<float>(f.number("min_p", 0, 1, 0.0));
  s.seed = f.uint("seed", UINT64_MAX, 0);
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2, 2, 0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2, 2, 0.0));
  if (!f.ok()) return f.status();
  return s;
}

}  // namespace tessera::api
