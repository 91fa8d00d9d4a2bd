#include "api/resume.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::api {

using json = nlohmann::json;

namespace {
// The cheap test before a full parse. A key may be spelled with \u escapes ("tessera\u005fresume"), which a
// plain search misses, so a body with any escape is parsed.
bool may_hold_resume(std::string_view body) {
  return body.find("tessera_resume") != std::string_view::npos || body.find("\\u") != std::string_view::npos;
}
}  // namespace

Result<std::optional<Resume>> parse_resume(std::string_view body, int vocab_size) {
  if (!may_hold_resume(body)) return std::optional<Resume>();
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("tessera_resume")) return std::optional<Resume>();
  const json& r = j["tessera_resume"];
  if (r.is_null()) return std::optional<Resume>();
  if (!r.is_object() || !r.contains("tokens") || !r["tokens"].is_array()) {
    return invalid_argument("'tessera_resume' must be an object with a 'tokens' array");
  }
  Resume out;
  for (const json& t : r["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
      return invalid_argument(
          fmt::format("'tessera_resume.tokens' holds {}, not a token id below {}", t.dump(), vocab_size));
    }
    out.tokens.push_back(t.get<int32_t>());
  }
  if (auto it = r.find("text_bytes"); it != r.end()) {
    if (!it->is_number_unsigned())
      return invalid_argument("'tessera_resume.text_bytes' must be a non-negative integer");
    out.text_bytes = it->get<uint64_t>();
  }
  if (auto it = r.find("preamble_sent"); it != r.end()) {
    if (!it->is_boolean()) return invalid_argument("'tessera_resume.preamble_sent' must be true or false");
    out.preamble_sent = it->get<bool>();
  }
  if (auto it = r.find("id"); it != r.end() && it->is_string()) out.id = it->get<std::string>().substr(0, 200);
  if (auto it = r.find("created"); it != r.end() && it->is_number_integer()) out.created = it->get<int64_t>();
  return std::optional<Resume>(std::move(out));
}

bool has_resume_field(std::string_view body) {
  if (!may_hold_resume(body)) return false;
  json j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("tessera_resume");
}

std::string token_comment(const std::vector<int32_t>& tokens) {
  return fmt::format("{}{}\n\n", kTokenComment, fmt::join(tokens, ","));
}

}  // namespace tessera::api
