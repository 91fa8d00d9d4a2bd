#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/core.h>

#include "api/internal/openai_fields.h"

namespace tessera::api::internal {
namespace {

using json = nlohmann::json;

ApiError bad(std::string message, std::string param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

bool is_integer(const json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
}

std::optional<ApiError> token_list(const json& a, std::vector<int32_t>& out) {
  for (const json& t : a) {
    if (!t.is_number_integer()) return bad("'prompt' must be a string or an array of token ids", "prompt");
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      return bad(fmt::format("token id {} is out of range", v), "prompt");
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) return bad("'prompt' must not be empty", "prompt");
  return std::nullopt;
}

// The variables every chat template gets from the server: a kwarg may not replace them.
const std::set<std::string>& reserved_template_variables() {
  static const std::set<std::string> names = {"messages",  "tools",     "add_generation_prompt", "bos_token",
                                              "eos_token", "documents", "continue_final_message"};
  return names;
}

}  // namespace

std::optional<ApiError> parse_prompts(const json& p, ApiRequest& r) {
  if (p.is_string()) {
    r.prompts.push_back({p.get<std::string>(), {}, false});
  } else if (!p.is_array() || p.empty()) {
    return bad("'prompt' must be a string, an array of token ids, or a non-empty array of either", "prompt");
  } else if (p[0].is_number()) {
    CompletionPrompt one;
    one.is_tokens = true;
    if (auto e = token_list(p, one.tokens)) return e;
    r.prompts.push_back(std::move(one));
  } else {
    if (p.size() > kMaxPromptsPerRequest)
      return bad(fmt::format("at most {} prompts per request, got {}", kMaxPromptsPerRequest, p.size()), "prompt");
    for (const json& item : p) {
      if (item.is_string()) {
        r.prompts.push_back({item.get<std::string>(), {}, false});
      } else if (item.is_array()) {
        CompletionPrompt one;
        one.is_tokens = true;
        if (auto e = token_list(item, one.tokens)) return e;
        r.prompts.push_back(std::move(one));
      } else {
        return bad("a list of prompts holds strings or arrays of token ids", "prompt");
      }
    }
  }
  const CompletionPrompt& first = r.prompts.front();
  r.prompt = first.text;
  r.prompt_tokens = first.tokens;
  r.prompt_is_tokens = first.is_tokens;
  return std::nullopt;
}

std::optional<ApiError> parse_sampling_fields(const json& j, ApiRequest& r) {
  SamplingParams& sp = r.generation.sampling;
  if (auto it = j.find("n"); it != j.end() && !it->is_null()) {
    if (!is_integer(*it)) return bad("'n' must be an integer", "n");
    const double n = it->get<double>();
    if (n < 1 || n > kMaxChoicesPerRequest)
      return bad(fmt::format("'n' must be between 1 and {}, got {}", kMaxChoicesPerRequest, it->dump()), "n");
    r.n = static_cast<int>(n);
  }
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    // Any integer is a seed, 0 included; negative ones are taken modulo 2^64 (vLLM takes any int).
    if (!it->is_number_integer()) return bad("'seed' must be an integer", "seed");
    sp.seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    if (it->size() > kMaxLogitBiasEntries)
      return bad(fmt::format("'logit_bias' may hold at most {} tokens", kMaxLogitBiasEntries), "logit_bias");
    for (const auto& [key, value] : it->items()) {
      // OpenAI's keys are token ids written as strings.
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (...) {
        used = 0;
      }
      if (used != key.size() || key.empty() || id < 0 || id > std::numeric_limits<int32_t>::max())
        return bad(fmt::format("'logit_bias' keys must be token ids, got '{}'", key), "logit_bias");
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -kMaxLogitBias ||
          value.get<double>() > kMaxLogitBias)
        return bad(fmt::format("the logit_bias of token {} must be a number between -100 and 100", id), "logit_bias");
      sp.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
    }
    std::sort(sp.logit_bias.begin(), sp.logit_bias.end());
    for (size_t i = 1; i < sp.logit_bias.size(); ++i) {
      if (sp.logit_bias[i].first == sp.logit_bias[i - 1].first)
        return bad(fmt::format("'logit_bias' names token {} twice", sp.logit_bias[i].first), "logit_bias");
    }
  }
  if (auto it = j.find("repetition_penalty"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || it->get<double>() > kMaxRepetitionPenalty)
      return bad(fmt::format("'repetition_penalty' must be a number in (0, {}]", kMaxRepetitionPenalty),
                 "repetition_penalty");
    sp.repetition_penalty = static_cast<float>(it->get<double>());
  }
  if (auto it = j.find("min_tokens"); it != j.end() && !it->is_null()) {
    if (!is_integer(*it) || it->get<double>() < 0 || it->get<double>() > std::numeric_limits<int32_t>::max())
      return bad("'min_tokens' must be a non-negative integer", "min_tokens");
    sp.min_tokens = static_cast<int>(it->get<double>());
  }
  if (auto it = j.find("prompt_logprobs"); it != j.end() && !it->is_null()) {
    if (!is_integer(*it) || it->get<double>() < 0 || it->get<double>() > 20)
      return bad("'prompt_logprobs' must be an integer between 0 and 20", "prompt_logprobs");
    r.generation.prompt_logprobs = static_cast<int>(it->get<double>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_chat_template_fields(const json& j, ApiRequest& r) {
  if (auto it = j.find("chat_template_kwargs"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const auto& [key, value] : it->items()) {
      if (reserved_template_variables().count(key))
        return bad(fmt::format("chat_template_kwargs may not set '{}': the server sets it", key),
                   "chat_template_kwargs");
    }
    if (!it->empty()) r.chat_template_kwargs_json = it->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (auto it = j.find("reasoning_effort"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "low" && *it != "medium" && *it != "high"))
      return bad("'reasoning_effort' must be 'low', 'medium' or 'high'", "reasoning_effort");
    r.reasoning_effort = it->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace tessera::api::internal
