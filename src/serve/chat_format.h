// Chat prompt formats for models served by this node: the model's own Jinja chat template, a
// `--chat-template` file or inline template, the named fallback families of model/chat_template.h
// (llama-2, llama-3, chatml), or "plain", which joins the message contents with blank lines and no role
// markers: the honest choice for base models such as stories260K that were never trained on a chat format.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "api/openai.h"
#include "base/status.h"
#include "model/chat_template_renderer.h"

namespace tessera::serve {

// A rendered chat prompt and how to tokenize it.
struct ChatPrompt {
  std::string text;
  bool add_bos = true;  // tokenize with the tokenizer's BOS (model/chat_template_renderer.h says when)
};

// Turns a chat request into the prompt text the model was trained on (honouring the request's
// add_generation_prompt and continue_final_message). InvalidArgument when it cannot; ResourceExhausted naming the
// limit when the template spends more than its budget; Cancelled once `cancelled` returns true (may be empty).
// A model's template is untrusted input: call this off the HTTP io threads (node_server.cc's render pool).
using ChatFormatter = std::function<Result<ChatPrompt>(const api::ApiRequest&, const std::function<bool()>& cancelled)>;

struct ChatFormat {
  ChatFormatter formatter;
  std::string description;  // "the model's chat template", "plain", ...
  std::string source;       // the Jinja template's text ("" for plain and the fallback families)
};

// `spec` is --chat-template: "plain", a fallback family name, a template file or inline template, or empty
// for the model's own template (FailedPrecondition when the model has none). `limits`: what one render of a
// Jinja template may spend (--template-max-steps, --template-max-memory).
Result<ChatFormat> make_chat_format(std::string_view spec, const model::ModelChatInfo& model,
                                    const model::jinja::RenderLimits& limits = {});
std::vector<std::string> chat_format_names();

// How much of `text` (what `format` rendered for `r`) other conversations with the same system messages and tools
// render too: the common start of `text` and the rendering of `r` cut after its first non-system message with that
// message's content left empty (the system prompt, any tools, and the next message's opening). 0 when `r` has no
// such message or the cut conversation does not render (a template that refuses it). Prefix reuse for hybrid models
// keeps the recurrent state there (engine::GenerationRequest::state_hint).
size_t shared_start(const ChatFormatter& format, const api::ApiRequest& r, std::string_view text,
                    const std::function<bool()>& cancelled);

// Whether `format` renders a reply to `r` back as it was generated when the conversation goes on: the rendering of
// `r` followed by an assistant message and a user message starts with `text` (what `format` rendered for `r`, with
// its generation prompt) and the reply's text. False for a template that drops or rewrites earlier replies (one that
// opens a think block in the generation prompt and leaves it out of the history), when `r` continues its final
// message or asks for no generation prompt, and when the probe does not render. Prefix reuse for hybrid models then
// keeps no state inside the reply (engine::GenerationRequest::keep_reply_state).
bool renders_reply_back(const ChatFormatter& format, const api::ApiRequest& r, std::string_view text,
                        const std::function<bool()>& cancelled);

}  // namespace tessera::serve
