// The chat template a server renders prompts with: the model's own Jinja template (GGUF
// `tokenizer.chat_template`, tokenizer_config.json `chat_template` as a string or a list of named templates,
// or chat_template.jinja), a file or inline template given as `--chat-template` (as vLLM takes it), or one
// of the named fallback families of chat_template.h ("llama-2", "llama-3", "chatml").
//
// Jinja templates see what transformers passes: `messages` (OpenAI messages, assistant `tool_calls` with
// `arguments` as an object), `tools` when the request has them, `add_generation_prompt`, `bos_token` and
// `eos_token` (the tokenizer's strings). A model with a "tool_use" named template renders with it when the
// request has tools, as transformers does. Like transformers and vLLM, the rendered text is tokenized
// without adding BOS: when the template writes the BOS token itself, `add_bos` says so (it is removed
// from the text, and the tokenizer adds the token), so that the prompt holds exactly one BOS.
//
// Thread-safety: immutable after choose(); render() may run on many threads at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "model/chat_template.h"
#include "model/jinja/template.h"

namespace tessera::model {

namespace jinja {
class Template;
}

// What a model file says about chat: its templates and special-token strings.
struct ModelChatInfo {
  std::string chat_template;         // the default template (empty: none)
  std::string tool_use_template;     // a named "tool_use" template, when the model has one
  std::string bos_token, eos_token;  // token strings ("<|begin_of_text|>"); empty when the model has none
};

struct LoadedModel;
// The templates of a loaded model, and its BOS/EOS token strings from its tokenizer (as transformers
// passes bos_token / eos_token: the tokens' text, "" when the tokenizer has none).
ModelChatInfo model_chat_info(const LoadedModel& m);

// How one conversation is rendered.
struct ChatRenderOptions {
  // transformers' and vLLM's add_generation_prompt: end with the opening of the assistant's turn.
  bool add_generation_prompt = true;
  // transformers' and vLLM's continue_final_message: the prompt ends inside the last message (an assistant reply
  // prefilled by the client), right after its text, so the model continues it; with add_generation_prompt false.
  bool continue_final_message = false;
  // What the template may spend (jinja/template.h); the server's --template-max-steps etc. set them.
  jinja::RenderLimits limits;
  // Polled while rendering; true stops it with Cancelled (the client went away). May be empty.
  std::function<bool()> cancelled;
  // A JSON object of extra template variables (vLLM's chat_template_kwargs, such as Qwen3's enable_thinking, and
  // reasoning_effort), or empty. A variable the template never names is InvalidArgument (it would have no
  // effect), and so is any for a named fallback family.
  std::string variables_json;
};

struct RenderedChat {
  std::string text;
  // Tokenize with the tokenizer's BOS: the template wrote bos_token first (removed from `text`), or a fallback
  // family, which leaves BOS to the tokenizer. False: the text is the whole prompt.
  bool add_bos = false;
};

class ChatTemplateRenderer {
 public:
  // `spec` as --chat-template takes it: empty (the model's own template; FailedPrecondition when it has
  // none), a fallback family name, a path to a template file, or a template itself (text with "{{" or
  // "{%"). InvalidArgument naming the line when a template does not parse; NotFound for a missing file.
  static Result<ChatTemplateRenderer> choose(std::string_view spec, const ModelChatInfo& model);

  // `messages_json`: a JSON array of messages; `tools_json`: a JSON array of tools or empty. Returns
  // InvalidArgument with the template's own message when it refuses the conversation (raise_exception), or
  // when continue_final_message has no final text to continue; ResourceExhausted naming the limit when the
  // template spends more than options.limits allow; Cancelled when options.cancelled() said so.
  Result<RenderedChat> render(std::string_view messages_json, std::string_view tools_json,
                              const ChatRenderOptions& options = {}) const;

  // "the model's chat template", "chatml (named fallback)", "template file x.jinja": for logs and errors.
  const std::string& description() const { return description_; }
  bool takes_tools() const { return takes_tools_; }
  // The Jinja template's text ("" for a named fallback family): what the server detects the tool-call and
  // reasoning formats from (serve/tool_parsers/tool_parser.h, serve/reasoning.h).
  const std::string& source() const { return source_; }

 private:
  std::optional<ChatTemplate> family_;
  std::shared_ptr<const jinja::Template> jinja_, jinja_tool_use_;
  std::string bos_, eos_;
  std::string description_;
  std::string source_, tool_use_source_;
  bool takes_tools_ = false;
};

}  // namespace tessera::model
