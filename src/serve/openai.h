// The OpenAI wire format: parsing /v1/completions and /v1/chat/completions bodies into a validated
// request, and the error body shape. Pure functions (no engine, no sockets), so every rejection rule is
// unit-testable. The JSON library stays inside the .cc files.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/engine.h"

namespace tessera::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
  std::string code;
};

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

struct ApiRequest {
  bool chat = false;
  std::string model;
  // completions: text, or token ids when prompt_is_tokens
  std::string prompt;
  std::vector<model::TokenId> prompt_tokens;
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;     // chat
  engine::GenerationRequest generation;  // sampling, stops, logprobs; prompt filled in later
  int max_tokens = -1;                   // -1: not given (completions default 16; chat: rest of the context)
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  std::string user;
};

// Parses and validates a request body. Malformed JSON, wrong types and out-of-range values are 400s
// naming the field; unsupported features (n > 1, best_of, tools, suffix) are 400s saying so.
std::variant<ApiRequest, ApiError> parse_request(std::string_view body, bool chat);

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const ApiError& e);

}  // namespace tessera::serve
