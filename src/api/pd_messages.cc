#include "api/pd_messages.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "base/json_fields.h"

namespace tessera::api {
namespace {

using json = nlohmann::json;

// Milliseconds a node may report for one phase: a day is already absurd; larger values would skew the
// stats (and least-latency routing) rather than describe anything real.
constexpr double kMaxPhaseMs = 86'400'000;
// An agent or region description is a few hundred bytes; this leaves room for attributes (UCX rkeys).
constexpr size_t kMaxDescriptionBytes = 16 << 10;
constexpr int64_t kMaxPrefillChoices = 16;  // engine::kMaxChoices (the api may not include the engine)
constexpr size_t kMaxPrefillStopTokens = 1 << 16;
constexpr int64_t kMaxLogprobs = 20;  // OpenAI's top_logprobs bound

json logprobs_to_json(const FirstTokenLogprobs& l) {
  json top = json::array();
  for (const auto& [id, lp] : l.top) top.push_back({id, lp});
  return {{"token", l.token}, {"logprob", l.logprob}, {"top", std::move(top)}};
}

// A log-probability as a prefill node may report it: finite and not above 0 (a float rounding above is tolerated).
bool plausible_logprob(const json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() <= 1e-4;
}

Status read_first_logprobs(const json& list, int vocab_size, int logprobs, const std::vector<int32_t>& tokens,
                           std::vector<FirstTokenLogprobs>& out) {
  auto bad = [](std::string what) { return invalid_argument("prefill reply: first_logprobs: " + what); };
  if (!list.is_array() || list.size() != tokens.size())
    return bad(fmt::format("one entry per choice ({}) expected", tokens.size()));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    if (!e.is_object() || !e.contains("token") || !e["token"].is_number_integer() ||
        e["token"].get<int64_t>() != tokens[i] || !e.contains("logprob") || !plausible_logprob(e["logprob"]))
      return bad(fmt::format("entry {} must name its choice's token {} with a log-probability <= 0", i, tokens[i]));
    FirstTokenLogprobs l{tokens[i], e["logprob"].get<float>(), {}};
    const json& top = e.contains("top") ? e["top"] : json::array();
    if (!top.is_array() || top.size() > static_cast<size_t>(std::max(0, logprobs)))
      return bad(fmt::format("entry {} has more than the {} alternatives asked for", i, logprobs));
    for (const json& t : top) {
      if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() || t[0].get<int64_t>() < 0 ||
          t[0].get<int64_t>() >= vocab_size || !plausible_logprob(t[1]))
        return bad(fmt::format("entry {}: an alternative is [token id, log-probability <= 0]", i));
      l.top.emplace_back(static_cast<int32_t>(t[0].get<int64_t>()), t[1].get<float>());
    }
    out.push_back(std::move(l));
  }
  return ok_status();
}

}  // namespace

Result<PrefillReply> parse_prefill_reply(std::string_view body, uint64_t expected_bytes, int vocab_size, int choices,
                                         int logprobs, DType expected_dtype) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return invalid_argument("prefill reply is not JSON");
  JsonFields f(j, "prefill reply");
  PrefillReply r;
  r.first_token = static_cast<int32_t>(f.integer("first_token", 0, vocab_size - 1));
  r.checksum = f.uint("checksum");
  r.compute_ms = f.number("compute_ms", 0, kMaxPhaseMs, 0.0);
  r.transfer_ms = f.number("transfer_ms", 0, kMaxPhaseMs, 0.0);
  r.transfer_wait_ms = f.number("transfer_wait_ms", 0, kMaxPhaseMs, 0.0);
  if (choices > 1) {
    if (const json* more = f.array("choice_tokens", static_cast<size_t>(choices - 1))) {
      for (const json& t : *more) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
          f.fail(fmt::format("prefill reply: choice token {} is not a token id in [0, {})", t.dump(), vocab_size));
          break;
        }
        r.choice_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      if (f.ok() && static_cast<int>(r.choice_tokens.size()) != choices - 1)
        f.fail(fmt::format("prefill reply: {} choice tokens for {} choices", r.choice_tokens.size(), choices));
    }
  }
  // Older fields the decode side does not need, still checked: a reply that disagrees about what was sent
  // describes some other transfer.
  if (f.has("bytes")) {
    const uint64_t bytes = f.uint("bytes");
    if (f.ok() && bytes != expected_bytes) {
      f.fail(fmt::format("prefill reply: 'bytes' = {} but {} were reserved", bytes, expected_bytes));
    }
  }
  // The bytes were sent in the type asked for, or the staging range holds something else.
  const std::string dtype = f.has("kv_dtype") ? f.string("kv_dtype", 16) : "f32";
  if (f.ok() && dtype != dtype_name(expected_dtype)) {
    f.fail(fmt::format("prefill reply: kv_dtype '{}' but {} was asked for", dtype, dtype_name(expected_dtype)));
  }
  r.kv_dtype = expected_dtype;
  if (!f.ok()) return f.status();
  if (logprobs >= 0) {
    if (!j.contains("first_logprobs")) return invalid_argument("prefill reply: first_logprobs missing (asked for)");
    std::vector<int32_t> tokens = {r.first_token};
    tokens.insert(tokens.end(), r.choice_tokens.begin(), r.choice_tokens.end());
    TS_RETURN_IF_ERROR(read_first_logprobs(j["first_logprobs"], vocab_size, logprobs, tokens, r.first_logprobs));
  }
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
  c.n = static_cast<int>(f.integer("n", 1, kMaxPrefillChoices, 1));
  c.ignore_eos = f.boolean("ignore_eos", false);
  c.window_from = static_cast<int>(f.integer("window_from", 0, max_prompt_tokens, -1));
  if (f.has("kv_dtype")) {
    const std::string dtype = f.string("kv_dtype", 16);
    const std::optional<DType> d = parse_dtype(dtype);
    if (f.ok() && (!d || !kv_wire_dtype(*d)))
      f.fail(fmt::format("prefill request: kv_dtype '{}' is not a KV wire type (f32, f16, bf16, q8_0, q4_0)", dtype));
    if (f.ok()) c.kv_dtype = *d;
  }
  c.logprobs = static_cast<int>(f.integer("logprobs", -1, kMaxLogprobs, -1));
  if (const json* stops = f.array("stop_token_ids", kMaxPrefillStopTokens, true)) {
    for (const json& t : *stops) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        f.fail(fmt::format("prefill request: stop token {} is not a token id", t.dump()));
        break;
      }
      c.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (const json* m = f.object("model", true)) c.model = *m;
  const json* sampling = f.object("sampling", true);
  const json* structured = f.object("structured", true);
  if (!f.ok()) return f.status();
  if (sampling != nullptr) {
    TS_ASSIGN_OR_RETURN(c.sampling, sampling_from_json(*sampling));
  }
  if (structured != nullptr) {
    auto s = structured_from_json(*structured);
    if (!s.ok()) return s.status().with_context("prefill request");
    c.structured = std::move(*s);
  }
  c.prompt.reserve(prompt->size());
  for (const json& t : *prompt) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
      return invalid_argument(
          fmt::format("prefill request: prompt token {} is not a token id in [0, {})", t.dump(), vocab_size));
    }
    c.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (c.export_from >= static_cast<int>(c.prompt.size())) {
    return invalid_argument("prefill request: export_from must leave at least one token");
  }
  if (c.window_from > static_cast<int>(c.prompt.size())) {
    return invalid_argument("prefill request: window_from is past the prompt's end");
  }
  c.window_from = std::max(c.window_from, c.export_from);  // absent, or before the first position sent: every row
  return c;
}

std::string prefill_reply_body(const PrefillReply& r) {
  json j = json{{"first_token", r.first_token},
                {"checksum", r.checksum},
                {"kv_dtype", std::string(dtype_name(r.kv_dtype))},
                {"bytes", r.bytes},
                {"overlap", r.overlap},
                {"compute_ms", r.compute_ms},
                {"transfer_wait_ms", r.transfer_wait_ms},
                {"transfer_ms", r.transfer_ms},
                {"prefill_ms", r.prefill_ms}};
  if (!r.choice_tokens.empty()) j["choice_tokens"] = r.choice_tokens;
  if (!r.first_logprobs.empty()) {
    json lps = json::array();
    for (const FirstTokenLogprobs& l : r.first_logprobs) lps.push_back(logprobs_to_json(l));
    j["first_logprobs"] = std::move(lps);
  }
  return j.dump();
}

std::string prefill_call_body(const PrefillCall& c) {
  json j = json{{"prompt", c.prompt},
                {"export_from", c.export_from},
                {"sampling", sampling_to_json(c.sampling)},
                {"agent", c.agent},
                {"region", c.region},
                {"offset", c.offset},
                {"tag", c.tag},
                {"model", c.model}};
  // Only when they ask for something: a prefill node older than these fields still serves the rest.
  if (c.n > 1) j["n"] = c.n;
  if (!c.stop_token_ids.empty()) j["stop_token_ids"] = c.stop_token_ids;
  if (c.ignore_eos) j["ignore_eos"] = true;
  if (c.window_from > c.export_from) j["window_from"] = c.window_from;
  if (c.kv_dtype != DType::kF32) j["kv_dtype"] = std::string(dtype_name(c.kv_dtype));
  if (c.logprobs >= 0) j["logprobs"] = c.logprobs;
  // The first token is sampled on the prefill node: it must follow the grammar too.
  if (!c.structured.none()) j["structured"] = structured_to_json(c.structured);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string pd_info_body(NodeRole role, const std::string& agent, const json& model) {
  return json{{"role", std::string(role_name(role))}, {"agent", agent}, {"model", model}}.dump();
}

Result<PdInfo> parse_pd_info(std::string_view body) {
  const auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("role") || !j["role"].is_string()) {
    return invalid_argument("pd info must be a JSON object with a string 'role'");
  }
  PdInfo info;
  info.role = j["role"].get<std::string>();
  if (!parse_role(info.role).ok()) return invalid_argument("pd info has an unknown role '" + info.role + "'");
  if (j.contains("agent") && j["agent"].is_string()) {
    std::istringstream in(j["agent"].get<std::string>());
    std::string tok;
    while (in >> tok) {
      if (tok.rfind("host=", 0) == 0) info.host_id = tok.substr(5);
    }
  }
  return info;
}

}  // namespace tessera::api
