#include "model/generation_defaults.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/formats/gguf/gguf_file.h"

namespace tessera::model {
namespace {

using json = nlohmann::json;

// The spellings llama.cpp's vocabulary loader adds to its end-of-generation set (llama-vocab.cpp), for the
// families Tessera runs and a few more that share their vocabularies.
constexpr std::array<std::string_view, 12> kEndOfGenerationText = {
    "<|eot_id|>",      "<|im_end|>", "<|end|>",    "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>",      "<|return|>", "<|call|>",      "<eos>",         "<turn|>"};  // last: Gemma 4

Status wrong_type(const char* key, const char* want) {
  return invalid_argument(fmt::format("generation_config.json: '{}' must be {}", key, want));
}

}  // namespace

Result<GenerationDefaults> parse_generation_config(std::string_view text, int vocab_size) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("generation_config.json is not a JSON object");
  GenerationDefaults g;
  g.source = "generation_config.json";
  auto number = [&](const char* key, std::optional<float>& out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return ok_status();
    if (!it->is_number()) return wrong_type(key, "a number");
    out = it->get<float>();
    return ok_status();
  };
  TS_RETURN_IF_ERROR(number("temperature", g.temperature));
  TS_RETURN_IF_ERROR(number("top_p", g.top_p));
  TS_RETURN_IF_ERROR(number("min_p", g.min_p));
  if (auto it = j.find("top_k"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return wrong_type("top_k", "an integer");
    g.top_k = std::max(0, it->get<int>());
  }
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    std::vector<json> ids = it->is_array() ? it->get<std::vector<json>>() : std::vector<json>{*it};
    for (const json& id : ids) {
      if (!id.is_number_integer()) return wrong_type("eos_token_id", "an integer or a list of integers");
      const auto v = id.get<int64_t>();
      if (v < 0 || v >= vocab_size)
        return invalid_argument(
            fmt::format("generation_config.json: eos_token_id {} is outside the vocabulary of {}", v, vocab_size));
      g.end_of_generation.push_back(static_cast<TokenId>(v));
    }
  }
  return g;
}

Result<GenerationDefaults> read_gguf_sampling(const GgufContents& c) {
  GenerationDefaults g;
  auto number = [&](const char* key, std::optional<float>& out) -> Status {
    if (!c.find(key)) return ok_status();
    TS_ASSIGN_OR_RETURN(double v, c.get_float(key));
    out = static_cast<float>(v);
    g.source = "GGUF metadata";
    return ok_status();
  };
  TS_RETURN_IF_ERROR(number("general.sampling.temp", g.temperature));
  TS_RETURN_IF_ERROR(number("general.sampling.top_p", g.top_p));
  TS_RETURN_IF_ERROR(number("general.sampling.min_p", g.min_p));
  if (c.find("general.sampling.top_k")) {
    TS_ASSIGN_OR_RETURN(int64_t k, c.get_int("general.sampling.top_k"));
    g.top_k = static_cast<int>(std::max<int64_t>(0, k));
    g.source = "GGUF metadata";
  }
  return g;
}

std::vector<TokenId> vocab_end_of_generation(const Tokenizer& tok) {
  std::vector<TokenId> ids;
  if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
  TokenId end = -1;
  bool has_return = false, has_call = false;
  for (TokenId id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_special(id)) {
      // Gemma 4's <|tool_response> ends generation in llama.cpp but is a visible (user-defined) token.
      if (tok.decode_piece(-1, id) == "<|tool_response>") ids.push_back(id);
      continue;
    }
    const std::string text = tok.special_text(id);
    if (std::find(kEndOfGenerationText.begin(), kEndOfGenerationText.end(), text) == kEndOfGenerationText.end())
      continue;
    if (text == "<|end|>") end = id;
    has_return = has_return || text == "<|return|>";
    has_call = has_call || text == "<|call|>";
    ids.push_back(id);
  }
  // Harmony (gpt-oss): <|end|> closes one message of a reply (the analysis before the final answer), and the
  // reply ends at <|return|> or <|call|>; llama.cpp drops <|end|> from its list when it sees both.
  if (has_return && has_call && end >= 0) std::erase(ids, end);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace tessera::model
