// The OpenAI wire format: parsing /v1/completions and /v1/chat/completions bodies into a validated
// request, and the error body shape. Pure functions (no engine, no sockets), so every rejection rule is
// unit-testable. The JSON library stays inside the .cc files.
//
// Part of the wire contract (tessera_api: base + JSON only) because the router validates bodies with it and
// must not link the engine; the node converts GenerationOptions into an engine request itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/sampling.h"
#include "api/structured_output.h"
#include "base/status.h"

namespace tessera::api {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
  std::string code;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, developer, tool
  std::string content;
};

// What a request asks of generation besides its prompt and length.
struct GenerationOptions {
  SamplingParams sampling;
  std::vector<std::string> stop;        // stop strings
  std::vector<int32_t> stop_token_ids;  // extra stop tokens
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // false: generated special tokens are spelled in the text (vLLM's field)
  int logprobs = -1;                // -1: none; 0..20: the chosen token's log-probability and this many alternatives
  StructuredOutput structured;      // response_format, structured_outputs, guided_*, json_schema, grammar
  int prompt_logprobs = -1;         // vLLM's prompt_logprobs: -1 none; 0..20 (echo with logprobs needs them too)
};

// One prompt of a /v1/completions request: text, or token ids.
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

inline constexpr int kMaxChoicesPerRequest = 16;     // n
inline constexpr size_t kMaxPromptsPerRequest = 64;  // a list of prompts in /v1/completions

struct ApiRequest {
  bool chat = false;
  std::string model;
  // completions: text, or token ids when prompt_is_tokens
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // completions: every prompt, in order (a list of strings or of token-id lists gives several; one choice per
  // prompt and n, prompt-major); prompt / prompt_tokens / prompt_is_tokens above are prompts[0]
  std::vector<CompletionPrompt> prompts;
  int n = 1;                          // choices per prompt (1..kMaxChoicesPerRequest)
  std::vector<ChatMessage> messages;  // chat
  // chat: the messages as a chat template sees them (JSON array, the client's key order): text content parts
  // joined, assistant tool-call `arguments` parsed from their JSON string into objects (as vLLM passes them)
  std::string messages_json;
  std::string tools_json;            // chat: the request's `tools` (JSON array), "" when none
  std::string tool_choice = "auto";  // "auto", "none", "required", or "function" (a named function, forced)
  std::string tool_choice_function;  // tool_choice "function": its name (one of `tools`)
  bool parallel_tool_calls = true;
  // chat: extra variables for the chat template (vLLM's chat_template_kwargs, a JSON object, "" when none) and
  // OpenAI's reasoning_effort ("" when not given), which reaches the template as the variable of that name.
  std::string chat_template_kwargs_json;
  std::string reasoning_effort;
  GenerationOptions generation;  // sampling, stops, logprobs
  int max_tokens = -1;           // -1: not given (completions default 16; chat: rest of the context)
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  // vLLM's return_token_ids: the prompt's and the reply's token ids beside the text (prompt_token_ids, token_ids)
  bool return_token_ids = false;
  // chat (vLLM's fields): end the prompt with the assistant turn's opening (the default), or inside the last
  // message so that the model continues it (continue_final_message, with add_generation_prompt false).
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::string user;
};

// Parses and validates a request body. Malformed JSON, wrong types and out-of-range values are 400s
// naming the field; unsupported features (best_of, suffix) are 400s saying so,
// and so is every field of the OpenAI or vLLM request that this server knows but would not honour (logit_bias,
// repetition_penalty, ...; see kNotHonoured in openai.cc). Structured output requests are read by
// parse_structured_output (api/structured_output.h).
// Sampling fields left out take `defaults` (the model's generation defaults; OpenAI's without them).
std::variant<ApiRequest, ApiError> parse_request(std::string_view body, bool chat, const SamplingParams& defaults = {});

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const ApiError& e);

// The error a failed Status answers with: its HTTP status from api/http_status.h and the OpenAI type for it
// (400s invalid_request_error, 429 rate_limit_error with code server_busy, 503 service_unavailable, ...).
ApiError error_for(const Status& s);

}  // namespace tessera::api
