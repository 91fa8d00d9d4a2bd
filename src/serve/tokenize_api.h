// POST /tokenize and POST /detokenize in vLLM's shapes: what a client uses to count and check tokens with
// the served model's own tokenizer. Pure functions of the body (no engine, no sockets), so every rule is
// unit-testable; node_server.cc routes to them.
//
// /tokenize, completion form: {"model"?, "prompt": str, "add_special_tokens"?: bool = true}
//           chat form:       {"model"?, "messages": [...], "add_generation_prompt"?: true,
//                              "continue_final_message"?: false, "add_special_tokens"?: false}
//   -> {"count", "max_model_len", "tokens": [ids], "token_strs": null}
// The chat form renders the messages with the server's chat template and tokenizes them exactly as
// /v1/chat/completions does: as in vLLM, add_special_tokens defaults to false there, so the ids are the
// template's own (its BOS where it writes one, none added); true adds the tokenizer's on top, as vLLM does.
// /detokenize: {"model"?, "tokens": [ids], "skip_special_tokens"?: bool = false} -> {"prompt": str}
//
// Bodies are validated like any public input: malformed JSON, wrong types, ids outside the vocabulary and
// a model other than the served one are 400/404 errors in OpenAI's error shape; fields this server cannot
// honour (return_token_strs, a request chat_template, tools) are 400s naming them, never silently ignored. The
// chat form runs a model's chat template (untrusted input): call it off the HTTP io threads; `cancelled` stops
// the render when the client goes away.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "serve/node_server.h"

namespace tessera::serve {

struct TokenizeReply {
  int status = 200;
  std::string body;  // JSON
};

// `model_names`: the names the node serves (the first is its own; a body's "model", when given, must be one).
TokenizeReply tokenize_request(std::string_view body, const model::Tokenizer& tokenizer, const ChatFormatter& chat,
                               const std::vector<std::string>& model_names, int max_model_len,
                               const std::function<bool()>& cancelled = {});
TokenizeReply detokenize_request(std::string_view body, const model::Tokenizer& tokenizer,
                                 const std::vector<std::string>& model_names);

}  // namespace tessera::serve
