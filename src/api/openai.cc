#include "api/openai.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/http_status.h"
#include "api/internal/openai_fields.h"

namespace tessera::api {
namespace {

using json = nlohmann::json;

ApiError bad(std::string message, std::string param = "") {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

// Reads an optional number field into `out` when present and not null; checks type and range.
std::optional<ApiError> number(const json& j, const char* key, double lo, double hi, double& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad(fmt::format("'{}' must be a number", key), key);
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v), key);
  out = v;
  return std::nullopt;
}

std::optional<ApiError> integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>())) {
    return bad(fmt::format("'{}' must be an integer", key), key);
  }
  double v = it->get<double>();
  if (v < static_cast<double>(lo) || v > static_cast<double>(hi)) {
    return bad(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, it->dump()), key);
  }
  out = static_cast<int64_t>(v);
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& j, const char* key, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(fmt::format("'{}' must be a boolean", key), key);
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> message_content(const json& m, std::string& out) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return bad("message 'content' must be a string or an array of content parts", "messages");
  for (const json& part : *it) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      return bad("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported", "messages");
    }
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

using ojson = nlohmann::ordered_json;  // keeps the client's key order, which templates print (tojson)

// One message as a chat template sees it; `text` is the already validated content.
std::optional<ApiError> template_message(const ojson& m, const std::string& text, ojson& out) {
  const std::string role = m["role"].get<std::string>();
  out = ojson::object();
  out["role"] = role;
  const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
  if (!m.contains("content") || m["content"].is_null()) {
    // An assistant turn that only calls tools has content null in OpenAI's API; templates see "" (as vLLM passes
    // it), since real ones test it with `in` and string methods (Qwen3: '</think>' in message.content).
    out["content"] = "";
  } else {
    out["content"] = text;
  }
  for (const char* key : {"name", "tool_call_id"}) {
    if (!m.contains(key) || m[key].is_null()) continue;
    if (!m[key].is_string()) return bad(fmt::format("message '{}' must be a string", key), "messages");
    out[key] = m[key];
  }
  if (role == "tool" && !out.contains("tool_call_id") && !out.contains("name"))
    return bad("a 'tool' message needs 'tool_call_id'", "messages");
  if (!has_calls) return std::nullopt;
  if (role != "assistant") return bad("only assistant messages carry 'tool_calls'", "messages");
  if (!m["tool_calls"].is_array()) return bad("'tool_calls' must be an array", "messages");
  ojson calls = ojson::array();
  for (const ojson& c : m["tool_calls"]) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      return bad("each tool call needs 'function': {'name', 'arguments'}", "messages");
    ojson call = c;
    ojson& args = call["function"]["arguments"];
    if (args.is_string()) {
      ojson parsed = ojson::parse(args.get<std::string>(), nullptr, false);
      if (parsed.is_discarded())
        return bad(
            fmt::format("the arguments of tool call '{}' are not valid JSON", c["function"]["name"].get<std::string>()),
            "messages");
      args = std::move(parsed);
    } else if (args.is_null()) {
      args = ojson::object();
    }
    calls.push_back(std::move(call));
  }
  out["tool_calls"] = std::move(calls);
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson& body, ApiRequest& r) {
  if (body.contains("tools") && !body["tools"].is_null()) {
    const ojson& tools = body["tools"];
    if (!tools.is_array()) return bad("'tools' must be an array", "tools");
    for (const ojson& t : tools) {
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        return bad("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
      if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
          !t["function"]["parameters"].is_null())
        return bad("a tool's 'parameters' must be a JSON Schema object", "tools");
    }
    if (!tools.empty()) r.tools_json = tools.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c.is_string() && (c == "auto" || c == "none" || c == "required")) {
      r.tool_choice = c.get<std::string>();
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
      r.tool_choice = "function";
      r.tool_choice_function = c["function"]["name"].get<std::string>();
    } else {
      return bad(
          "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
          "tool_choice");
    }
    // Forcing a call (enforced by a grammar of the tools' parameter schemas, serve/forced_tools.h) needs tools.
    if ((r.tool_choice == "required" || r.tool_choice == "function") && r.tools_json.empty())
      return bad(fmt::format("tool_choice '{}' needs 'tools'", r.tool_choice), "tool_choice");
    if (r.tool_choice == "function") {
      bool found = false;
      for (const ojson& t : body["tools"]) found = found || t["function"]["name"] == r.tool_choice_function;
      if (!found)
        return bad(fmt::format("tool_choice names function '{}', which is not among 'tools'", r.tool_choice_function),
                   "tool_choice");
    }
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean())
      return bad("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
  return std::nullopt;
}

// Fields of the OpenAI (and vLLM) request that this server knows but does not act on, with the values that
// ask for nothing (those are accepted): any other value is a 400 naming the field, never silently ignored.
struct NotHonoured {
  const char* field;
  bool chat_only;
  bool (*harmless)(const json& value);
};
bool never(const json&) { return false; }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_one(const json& v) { return v.is_number() && v.get<double>() == 1.0; }
bool is_empty(const json& v) { return (v.is_object() || v.is_array()) && v.empty(); }
constexpr NotHonoured kNotHonoured[] = {
    {"function_call", true, never},
    {"prediction", true, never},
    {"web_search_options", true, never},
    {"modalities", true, [](const json& v) { return v == json::array({"text"}); }},
    {"store", true, is_false},
    {"verbosity", true, never},
    {"service_tier", false, [](const json& v) { return v == "auto" || v == "default"; }},
    {"length_penalty", false, is_one},
    {"use_beam_search", false, is_false},
    {"include_stop_str_in_output", false, is_false},
    {"truncate_prompt_tokens", false, never},
    {"allowed_token_ids", false, is_empty},
    {"bad_words", false, is_empty},
    {"echo", true, is_false},  // chat; completions honour it
    {"chat_template", true, never},
    {"documents", true, never},
};

std::optional<ApiError> refuse_not_honoured(const json& j, bool chat) {
  for (const NotHonoured& n : kNotHonoured) {
    if (n.chat_only && !chat) continue;
    auto it = j.find(n.field);
    if (it == j.end() || it->is_null() || n.harmless(*it)) continue;
    return bad(fmt::format("'{}' is not supported by this server (a request asking for it would not get it)", n.field),
               n.field);
  }
  return std::nullopt;
}

}  // namespace

std::string error_body(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError error_for(const Status& s) {
  const int status = http_status(s);
  switch (status) {
    case 400:
    case 404:
    case 409:
      return {status, s.message(), "invalid_request_error", "", ""};
    case 401:
    case 403:
      return {status, s.message(), "authentication_error", "", ""};
    case 429:
      return {status, s.message(), "rate_limit_error", "", "server_busy"};
    case 503:
    case 504:
      return {status, s.message(), "service_unavailable", "", ""};
    default:
      return {status, s.message(), "server_error", "", ""};
  }
}

std::variant<ApiRequest, ApiError> parse_request(std::string_view body, bool chat, const SamplingParams& defaults) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("the request body is not valid JSON");
  if (!j.is_object()) return bad("the request body must be a JSON object");
  ApiRequest r;
  r.chat = chat;
  if (!j.contains("model") || !j["model"].is_string()) return bad("'model' is required and must be a string", "model");
  r.model = j["model"].get<std::string>();

  if (chat) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty()) return bad("'messages' must be a non-empty array", "messages");
    const ojson ordered = ojson::parse(body, nullptr, false);
    ojson template_messages = ojson::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return bad("each message needs a string 'role'", "messages");
      }
      ChatMessage msg{m["role"].get<std::string>(), ""};
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "developer" &&
          msg.role != "tool") {
        return bad(fmt::format("unsupported message role '{}'", msg.role), "messages");
      }
      if (auto e = message_content(m, msg.content)) return *e;
      ojson tm;
      if (auto e = template_message(ordered["messages"][i], msg.content, tm)) return *e;
      template_messages.push_back(std::move(tm));
      r.messages.push_back(std::move(msg));
    }
    r.messages_json = template_messages.dump(-1, ' ', false, ojson::error_handler_t::replace);
    if (auto e = parse_tools(ordered, r)) return *e;
    if (auto e = boolean(j, "add_generation_prompt", r.add_generation_prompt)) return *e;
    if (auto e = boolean(j, "continue_final_message", r.continue_final_message)) return *e;
    if (r.continue_final_message && r.add_generation_prompt)
      return bad(
          "'continue_final_message' and 'add_generation_prompt' cannot both be true (set add_generation_prompt "
          "to false to continue the last message)",
          "continue_final_message");
    if (auto e = internal::parse_chat_template_fields(j, r)) return *e;
    for (const char* unsupported : {"functions", "audio"}) {
      if (j.contains(unsupported) && !j[unsupported].is_null()) {
        return bad(fmt::format("'{}' is not supported by this server", unsupported), unsupported);
      }
    }
  } else {
    auto it = j.find("prompt");
    if (it == j.end() || it->is_null()) return bad("'prompt' is required", "prompt");
    if (auto e = internal::parse_prompts(*it, r)) return *e;
    if (auto e = boolean(j, "echo", r.echo)) return *e;
    if (j.contains("suffix") && !j["suffix"].is_null()) return bad("'suffix' is not supported", "suffix");
    if (j.contains("best_of") && !j["best_of"].is_null() && j["best_of"] != 1)
      return bad("'best_of' > 1 is not supported", "best_of");
  }

  if (auto e = boolean(j, "return_token_ids", r.return_token_ids)) return *e;
  if (auto e = refuse_not_honoured(j, chat)) return *e;
  std::string structured_param;
  if (Status st = parse_structured_output(body, r.generation.structured, structured_param); !st.ok())
    return bad(std::string(st.message()), structured_param);

  int64_t max_tokens = -1;
  // 0 only with echo on completions: the prompt scored (its logprobs), nothing generated (vLLM, lm-eval).
  if (auto e = integer(j, "max_tokens", chat ? 1 : 0, std::numeric_limits<int32_t>::max(), max_tokens)) return *e;
  if (max_tokens == 0 && !r.echo)
    return bad("'max_tokens' must be at least 1 (0 only with 'echo', to score the prompt)", "max_tokens");
  if (chat) {
    if (auto e = integer(j, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), max_tokens)) return *e;
  }
  r.max_tokens = static_cast<int>(max_tokens);

  SamplingParams& sp = r.generation.sampling;
  double v = defaults.temperature;
  if (auto e = number(j, "temperature", 0.0, 2.0, v)) return *e;
  sp.temperature = static_cast<float>(v);
  v = defaults.top_p;
  if (auto e = number(j, "top_p", 0.0, 1.0, v)) return *e;
  if (v <= 0.0) return bad("'top_p' must be greater than 0", "top_p");
  sp.top_p = static_cast<float>(v);
  int64_t k = defaults.top_k;
  if (auto e = integer(j, "top_k", -1, 1 << 20, k)) return *e;
  sp.top_k = k < 0 ? 0 : static_cast<int>(k);  // -1 means "all", as in vLLM
  v = defaults.min_p;
  if (auto e = number(j, "min_p", 0.0, 1.0, v)) return *e;
  sp.min_p = static_cast<float>(v);
  v = 0.0;
  if (auto e = number(j, "presence_penalty", -2.0, 2.0, v)) return *e;
  sp.presence_penalty = static_cast<float>(v);
  v = 0.0;
  if (auto e = number(j, "frequency_penalty", -2.0, 2.0, v)) return *e;
  sp.frequency_penalty = static_cast<float>(v);
  if (auto e = internal::parse_sampling_fields(j, r)) return *e;

  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r.generation.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 16) {
      for (const json& s : *it) {
        if (!s.is_string()) return bad("'stop' must be a string or an array of strings", "stop");
        r.generation.stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("'stop' must be a string or an array of at most 16 strings", "stop");
    }
    for (const std::string& s : r.generation.stop) {
      if (s.empty()) return bad("stop strings must not be empty", "stop");
    }
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return bad("'stop_token_ids' must be an array of integers", "stop_token_ids");
    for (const json& t : *it) {
      if (!t.is_number_integer()) return bad("'stop_token_ids' must be an array of integers", "stop_token_ids");
      r.generation.stop_token_ids.push_back(t.get<int32_t>());
    }
  }
  if (auto e = boolean(j, "ignore_eos", r.generation.ignore_eos)) return *e;
  if (auto e = boolean(j, "skip_special_tokens", r.generation.skip_special_tokens)) return *e;
  // Special tokens spelled in the text are joined as they are, which is spaces_between_special_tokens false.
  bool spaces = false;
  if (auto e = boolean(j, "spaces_between_special_tokens", spaces)) return *e;
  if (spaces && !r.generation.skip_special_tokens)
    return bad("'spaces_between_special_tokens' true is not supported: special tokens are spelled without spaces",
               "spaces_between_special_tokens");

  if (chat) {
    bool logprobs = false;
    if (auto e = boolean(j, "logprobs", logprobs)) return *e;
    int64_t top = 0;
    if (auto e = integer(j, "top_logprobs", 0, 20, top)) return *e;
    if (top > 0 && !logprobs) return bad("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    r.generation.logprobs = logprobs ? static_cast<int>(top) : -1;
  } else {
    int64_t lp = -1;
    if (auto e = integer(j, "logprobs", 0, 20, lp)) return *e;
    r.generation.logprobs = static_cast<int>(lp);
  }

  if (auto e = boolean(j, "stream", r.stream)) return *e;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("'stream_options' must be an object", "stream_options");
    if (!r.stream) return bad("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (auto e = boolean(*it, "include_usage", r.include_usage)) return *e;
  }
  if (r.stream && j.contains("prompt_logprobs") && !j["prompt_logprobs"].is_null())
    return bad("'prompt_logprobs' cannot be streamed (as in vLLM); send the request with stream false",
               "prompt_logprobs");
  if (auto it = j.find("user"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return bad("'user' must be a string", "user");
    r.user = it->get<std::string>();
  }
  return r;
}

}  // namespace tessera::api
