#include "serve/pd_messages.h"

#include <fmt/format.h>

#include "base/json_fields.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

// Milliseconds a node may report for one phase: a day is already absurd; larger values would skew the
// stats (and least-latency routing) rather than describe anything real.
constexpr double kMaxPhaseMs = 86'400'000;
// An agent or region description is a few hundred bytes; this leaves room for attributes (UCX rkeys).
constexpr size_t kMaxDescriptionBytes = 16 << 10;

}  // namespace

json sampling_to_json(const engine::SamplingParams& s) {
  return {{"temperature", s.temperature},
          {"top_p", s.top_p},
          {"top_k", s.top_k},
          {"min_p", s.min_p},
          {"seed", s.seed},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty}};
}

Result<engine::SamplingParams> sampling_from_json(const json& j) {
  // The same bounds as the public API (openai.cc), so a peer cannot ask for what a client may not.
  JsonFields f(j, "sampling");
  engine::SamplingParams s;
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

Result<PrefillReply> parse_prefill_reply(std::string_view body, uint64_t expected_bytes, int vocab_size) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return invalid_argument("prefill reply is not JSON");
  JsonFields f(j, "prefill reply");
  PrefillReply r;
  r.first_token = static_cast<model::TokenId>(f.integer("first_token", 0, vocab_size - 1));
  r.checksum = f.uint("checksum");
  r.compute_ms = f.number("compute_ms", 0, kMaxPhaseMs, 0.0);
  r.transfer_ms = f.number("transfer_ms", 0, kMaxPhaseMs, 0.0);
  r.transfer_wait_ms = f.number("transfer_wait_ms", 0, kMaxPhaseMs, 0.0);
  // Older fields the decode side does not need, still checked: a reply that disagrees about what was sent
  // describes some other transfer.
  if (f.has("bytes")) {
    const uint64_t bytes = f.uint("bytes");
    if (f.ok() && bytes != expected_bytes) {
      f.fail(fmt::format("prefill reply: 'bytes' = {} but {} were reserved", bytes, expected_bytes));
    }
  }
  if (f.has("kv_dtype")) {
    const std::string dtype = f.string("kv_dtype", 16);
    if (f.ok() && dtype != "f32") f.fail(fmt::format("prefill reply: unsupported kv_dtype '{}'", dtype));
  }
  if (!f.ok()) return f.status();
  return r;
}

Result<PrefillCall> parse_prefill_call(std::string_view body, int vocab_size, int max_prompt_tokens) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return invalid_argument("prefill request is not JSON");
  JsonFields f(j, "prefill request");
  PrefillCall c;
  const json* prompt = f.array("prompt", static_cast<size_t>(max_prompt_tokens));
  c.agent = f.string("agent", kMaxDescriptionBytes);
  c.region = f.string("region", kMaxDescriptionBytes);
  c.offset = f.uint("offset", UINT64_MAX, 0);
  c.tag = f.uint("tag");
  c.export_from = static_cast<int>(f.integer("export_from", 0, max_prompt_tokens, 0));
  if (const json* m = f.object("model", true)) c.model = *m;
  const json* sampling = f.object("sampling", true);
  if (!f.ok()) return f.status();
  if (sampling != nullptr) {
    TS_ASSIGN_OR_RETURN(c.sampling, sampling_from_json(*sampling));
  }
  c.prompt.reserve(prompt->size());
  for (const json& t : *prompt) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
      return invalid_argument(
          fmt::format("prefill request: prompt token {} is not a token id in [0, {})", t.dump(), vocab_size));
    }
    c.prompt.push_back(static_cast<model::TokenId>(t.get<int64_t>()));
  }
  if (c.export_from >= static_cast<int>(c.prompt.size())) {
    return invalid_argument("prefill request: export_from must leave at least one token");
  }
  return c;
}

}  // namespace tessera::serve
