// Reasoning in generated text -> OpenAI-style `reasoning_content` (vLLM's field), for the formats reasoning
// models write it in. The parser names are vLLM's (`--reasoning-parser`):
//  - qwen3:       `<think>...</think>` then the answer (Qwen3, QwQ). The reply starts in reasoning when it
//                 opens with `<think>`, or when the prompt already opened one (a template that ends the
//                 generation prompt with `<think>\n`); otherwise it is all content (Qwen3 with
//                 enable_thinking false renders an empty think block into the prompt).
//  - deepseek_r1: the same tags, but the reply is reasoning until `</think>` whether or not `<think>` was
//                 written (DeepSeek-R1's template opens it in the prompt).
//  - gpt_oss:     OpenAI's harmony format: `<|channel|>analysis<|message|>...<|end|>` is reasoning,
//                 `<|start|>assistant<|channel|>final<|message|>...` the content. Other channels
//                 (commentary: tool calls and preambles) pass through verbatim, markup included, as content,
//                 for a tool-call parser to read. The markers are special tokens, so a server using this
//                 parser spells special tokens in the text it gives the parser.
// A reply cut off inside its reasoning (finish_reason length) has all of it as reasoning_content.
//
// Streaming: feed() takes text as it is generated and returns what can go out now; bytes that may be the
// start of a tag are held back until they are known. finish() releases what is left. Pure, so every rule is
// unit-tested over token streams without a model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::serve {

enum class ReasoningFormat : uint8_t { kNone, kQwen3, kDeepSeekR1, kGptOss };

std::string_view reasoning_format_name(ReasoningFormat f);  // "none", "qwen3", "deepseek_r1", "gpt_oss"
// InvalidArgument listing the known names.
Result<ReasoningFormat> reasoning_format_from_name(std::string_view name);
std::vector<std::string> reasoning_format_names();
// From a chat template's source: harmony channels -> gpt_oss; `<think>` -> deepseek_r1 for DeepSeek's
// `<｜Assistant｜>` templates, qwen3 otherwise; else none.
ReasoningFormat detect_reasoning_format(std::string_view template_source);
// `--reasoning-parser`: a name (as vLLM names them, or "none"), or empty to detect it from the template.
Result<ReasoningFormat> choose_reasoning_format(std::string_view flag, std::string_view template_source);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // `prompt`: the rendered prompt the reply continues (a `<think>` it left open starts the reply in reasoning).
  ReasoningParser(ReasoningFormat format, std::string_view prompt);
  ReasoningDelta feed(std::string_view text);
  ReasoningDelta finish();
  ReasoningFormat format() const { return format_; }

 private:
  enum class State : uint8_t { kStart, kReasoning, kContent, kHeader, kBody };
  void run(ReasoningDelta& out, bool final);
  void run_think(ReasoningDelta& out, bool final);
  void run_harmony(ReasoningDelta& out, bool final);

  ReasoningFormat format_;
  State state_ = State::kStart;
  bool reasoning_first_ = false;  // think formats: the reply starts in reasoning without a `<think>`
  std::string buf_;               // bytes not yet given out
  std::string header_;            // harmony: the current message's header (channel and recipient)
  std::string channel_;           // harmony: the current message's channel
};

// feed(text) + finish() in one call: a whole reply.
ReasoningDelta split_reasoning(ReasoningFormat format, std::string_view prompt, std::string_view text);

}  // namespace tessera::serve
