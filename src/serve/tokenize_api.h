// POST /tokenize and POST /detokenize in vLLM's shapes: what a client uses to count and check tokens with
// the served model's own tokenizer. Pure functions of the body (no engine, no sockets), so every rule is
// unit-testable; node_server.cc routes to them.
//
// /tokenize, completion form: {"model"?, "prompt": str, "add_special_tokens"?: bool = true}
//           chat form:       {"model"?, "messages": [...], "add_generation_prompt"?: true,
//                              "add_special_tokens"?: bool}
//   -> {"count", "max_model_len", "tokens": [ids], "token_strs": null}
// The chat form renders the messages with the server's chat template and tokenizes them exactly as
// /v1/chat/completions does (Tessera's templates leave BOS to the tokenizer, so add_special_tokens defaults
// to true there, and the ids equal vLLM's, whose templates spell BOS and default it to false).
// /detokenize: {"model"?, "tokens": [ids], "skip_special_tokens"?: bool = false} -> {"prompt": str}
//
// Bodies are validated like any public input: malformed JSON, wrong types, ids outside the vocabulary and
// a model other than the served one are 400/404 errors in OpenAI's error shape; fields this server cannot
// honour (add_generation_prompt false, return_token_strs, continue_final_message, a request chat_template)
// are 400s naming them, never silently ignored.
#pragma once

#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer.h"
#include "serve/node_server.h"

namespace tessera::serve {

struct TokenizeReply {
  int status = 200;
  std::string body;  // JSON
};

TokenizeReply tokenize_request(std::string_view body, const model::Tokenizer& tokenizer, const ChatFormatter& chat,
                               const std::string& model_name, int max_model_len);
TokenizeReply detokenize_request(std::string_view body, const model::Tokenizer& tokenizer,
                                 const std::string& model_name);

}  // namespace tessera::serve
