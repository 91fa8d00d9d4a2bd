#include "api/embeddings.h"

#include <cmath>
#include <cstring>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::api {
namespace {

using json = nlohmann::json;

ApiError bad(std::string message, std::string param = "") {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

bool is_token_id(const json& x) { return x.is_number_integer() || x.is_number_unsigned(); }

// One list of token ids; an error message when it is not one.
std::optional<std::string> token_list(const json& a, std::vector<int64_t>& out) {
  if (a.empty()) return "a token list in 'input' is empty";
  for (const json& x : a) {
    if (!is_token_id(x)) return "'input' mixes token ids with other values";
    out.push_back(x.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(x.get<uint64_t>(), INT64_MAX))
                                         : x.get<int64_t>());
  }
  return std::nullopt;
}

}  // namespace

std::variant<EmbeddingRequest, ApiError> parse_embedding_request(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("the request body is not valid JSON");
  if (!j.is_object()) return bad("the request body must be a JSON object");
  EmbeddingRequest r;
  if (!j.contains("model") || !j["model"].is_string()) return bad("'model' is required and must be a string", "model");
  r.model = j["model"].get<std::string>();
  if (!j.contains("input") || j["input"].is_null()) return bad("'input' is required", "input");
  const json& in = j["input"];
  if (in.is_string()) {
    r.inputs.push_back({false, in.get<std::string>(), {}});
  } else if (in.is_array()) {
    if (in.empty()) return bad("'input' must not be an empty list", "input");
    if (in.size() > kMaxEmbeddingInputs && !is_token_id(in[0]))
      return bad(fmt::format("'input' holds {} items; at most {} are allowed", in.size(), kMaxEmbeddingInputs),
                 "input");
    if (is_token_id(in[0])) {  // one input as token ids
      EmbeddingInput e{true, "", {}};
      if (auto err = token_list(in, e.ids)) return bad(*err, "input");
      r.inputs.push_back(std::move(e));
    } else {
      for (const json& x : in) {
        if (x.is_string()) {
          r.inputs.push_back({false, x.get<std::string>(), {}});
        } else if (x.is_array()) {
          EmbeddingInput e{true, "", {}};
          if (auto err = token_list(x, e.ids)) return bad(*err, "input");
          r.inputs.push_back(std::move(e));
        } else {
          return bad("'input' must be a string, a list of strings, a list of token ids or a list of token-id lists",
                     "input");
        }
      }
    }
  } else {
    return bad("'input' must be a string, a list of strings, a list of token ids or a list of token-id lists", "input");
  }
  for (const EmbeddingInput& e : r.inputs) {
    if (!e.is_tokens && e.text.empty()) return bad("'input' must not contain an empty string", "input");
  }
  if (auto it = j.find("encoding_format"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "float" && *it != "base64"))
      return bad("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    r.base64 = *it == "base64";
  }
  if (auto it = j.find("dimensions"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 20))
      return bad("'dimensions' must be a positive integer", "dimensions");
    r.dimensions = static_cast<int>(it->get<int64_t>());
  }
  if (auto it = j.find("user"); it != j.end() && !it->is_null() && !it->is_string())
    return bad("'user' must be a string", "user");
  if (auto it = j.find("normalize"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("'normalize' must be a boolean", "normalize");
    r.normalize = it->get<bool>();
  }
  if (auto it = j.find("embd_normalize"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || (it->get<int64_t>() != -1 && it->get<int64_t>() != 2))
      return bad("'embd_normalize' must be -1 (none) or 2 (Euclidean); other norms are not supported",
                 "embd_normalize");
    if (r.normalize && *r.normalize != (it->get<int64_t>() == 2))
      return bad("'normalize' and 'embd_normalize' disagree", "embd_normalize");
    r.normalize = it->get<int64_t>() == 2;
  }
  if (auto it = j.find("truncate_prompt_tokens"); it != j.end() && !it->is_null())
    return bad("'truncate_prompt_tokens' is not supported by this server (a request asking for it would not get it)",
               "truncate_prompt_tokens");
  return r;
}

std::vector<float> shape_embedding(std::span<const float> pooled, std::optional<int> dimensions, bool normalize) {
  const size_t n = dimensions ? std::min(pooled.size(), static_cast<size_t>(*dimensions)) : pooled.size();
  std::vector<float> out(pooled.begin(), pooled.begin() + static_cast<std::ptrdiff_t>(n));
  if (!normalize) return out;
  double ss = 0.0;
  for (float x : out) ss += static_cast<double>(x) * x;
  if (ss > 0.0) {
    const double inv = 1.0 / std::sqrt(ss);
    for (float& x : out) x = static_cast<float>(x * inv);
  }
  return out;
}

std::string base64_f32(std::span<const float> v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian float32, whatever the host's order
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<uint8_t>(u >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t a = bytes[i], b = i + 1 < bytes.size() ? bytes[i + 1] : 0,
                   c = i + 2 < bytes.size() ? bytes[i + 2] : 0;
    const uint32_t t = (a << 16) | (b << 8) | c;
    out += kAlphabet[(t >> 18) & 63];
    out += kAlphabet[(t >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(t >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[t & 63] : '=';
  }
  return out;
}

std::string embedding_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                               int64_t prompt_tokens, bool base64) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      e["embedding"] = base64_f32(vectors[i]);
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(std::move(e));
  }
  json out = {{"object", "list"},
              {"data", std::move(data)},
              {"model", model},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::api
