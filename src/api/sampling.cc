#include "api/sampling.h"

#include <cmath>
#include <cstdint>

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
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= kMaxRepetitionPenalty)) {
    return invalid_argument(
        fmt::format("repetition_penalty must be in (0, {}], got {}", kMaxRepetitionPenalty, p.repetition_penalty));
  }
  if (p.logit_bias.size() > kMaxLogitBiasEntries)
    return invalid_argument(
        fmt::format("logit_bias has {} entries, more than {}", p.logit_bias.size(), kMaxLogitBiasEntries));
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0) return invalid_argument(fmt::format("logit_bias names token id {}", id));
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      return invalid_argument(fmt::format("logit_bias of token {} must be in [-100, 100], got {}", id, bias));
    if (i > 0 && p.logit_bias[i - 1].first >= id)
      return invalid_argument("logit_bias entries must be sorted by token id, one per id");
  }
  if (p.min_tokens < 0) return invalid_argument(fmt::format("min_tokens must be >= 0, got {}", p.min_tokens));
  return ok_status();
}

json sampling_to_json(const SamplingParams& s) {
  json j = {{"temperature", s.temperature},
            {"top_p", s.top_p},
            {"top_k", s.top_k},
            {"min_p", s.min_p},
            {"presence_penalty", s.presence_penalty},
            {"frequency_penalty", s.frequency_penalty},
            {"repetition_penalty", s.repetition_penalty},
            {"min_tokens", s.min_tokens}};
  if (s.seed) j["seed"] = *s.seed;  // absent: not seeded
  // [[id, bias], ...]: JSON object keys would have to be strings, and the order is the struct's.
  json bias = json::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back({id, b});
  if (!bias.empty()) j["logit_bias"] = std::move(bias);
  return j;
}

Result<SamplingParams> sampling_from_json(const json& j) {
  // The same bounds as the public API (openai.cc), so a peer cannot ask for what a client may not.
  JsonFields f(j, "sampling");
  SamplingParams s;
  s.temperature = static_cast<float>(f.number("temperature", 0, 2, 1.0));
  s.top_p = static_cast<float>(f.number("top_p", 0, 1, 1.0));
  s.top_k = static_cast<int>(f.integer("top_k", 0, 1 << 20, 0));
  s.min_p = static_cast<float>(f.number("min_p", 0, 1, 0.0));
  if (f.has("seed") && !j["seed"].is_null()) s.seed = f.uint("seed");
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2, 2, 0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2, 2, 0.0));
  s.repetition_penalty = static_cast<float>(f.number("repetition_penalty", 0, kMaxRepetitionPenalty, 1.0));
  s.min_tokens = static_cast<int>(f.integer("min_tokens", 0, INT32_MAX, 0));
  if (const json* bias = f.array("logit_bias", kMaxLogitBiasEntries, /*optional=*/true)) {
    for (const json& e : *bias) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number()) {
        f.fail("sampling: 'logit_bias' must hold [token id, bias] pairs");
        break;
      }
      const int64_t id = e[0].get<int64_t>();
      if (id < 0 || id > INT32_MAX) {
        f.fail(fmt::format("sampling: logit_bias token id {} is out of range", id));
        break;
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(e[1].get<double>()));
    }
  }
  if (!f.ok()) return f.status();
  TS_RETURN_IF_ERROR(validate(s));  // bias range and order, repetition_penalty > 0
  return s;
}

}  // namespace tessera::api
