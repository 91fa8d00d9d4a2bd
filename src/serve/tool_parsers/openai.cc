// openai: gpt-oss, in OpenAI's harmony format. A call is a message to a function recipient on the commentary
// channel, its body the arguments as JSON:
//   <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}<|call|>
// (the recipient may also stand in the role part: `<|start|>assistant to=functions.f<|channel|>commentary json`,
// the way gpt-oss's template writes calls back; the first message continues the prompt's `<|start|>assistant`).
// The markers are special tokens, spelled for this parser. With the gpt_oss reasoning parser (serve/reasoning.h)
// the analysis channel has become reasoning_content and the final channel plain content before this parser reads
// the text; commentary arrives verbatim. A message that is not a call gives its body as content, its header
// dropped; `<|call|>` ends generation, so a call's body usually ends the text.
#include <array>

#include "serve/tool_parsers/builtin.h"

namespace tessera::serve {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>",
                           kRecipient = " to=";
constexpr std::array<std::string_view, 3> kEnds = {"<|call|>", "<|end|>", "<|return|>"};
constexpr std::string_view kFunctions = "functions.";
using Step = JsonScanner::Step;

class HarmonyParser final : public JsonCallParser {
 public:
  using JsonCallParser::JsonCallParser;

 private:
  enum class State : uint8_t { kText, kHeader, kArgs, kAfterArgs, kBody };

  // The earliest message start in buf_, and how much of its tail may be the start of one.
  size_t next_start(size_t& hold) const {
    size_t at = std::string::npos;
    hold = 0;
    for (std::string_view m : {kStart, kChannel}) {
      at = std::min(at, buf_.find(m));
      hold = std::max(hold, partial_suffix(buf_, m));
    }
    return at;
  }

  // The end marker at the front of `s`: its length, 0 when none, npos when `s` may still become one.
  static size_t end_marker(std::string_view s, bool final) {
    for (std::string_view e : kEnds) {
      if (s.starts_with(e)) return e.size();
      if (!final && is_partial(s, e)) return std::string::npos;
    }
    return 0;
  }

  void parse(bool final) override {
    for (;;) {
      switch (state_) {
        case State::kText: {
          if (first_ && buf_.starts_with(kRecipient)) {  // the prompt's <|start|>assistant continues
            first_ = false;
            state_ = State::kHeader;
            continue;
          }
          if (first_ && !final && is_partial(buf_, kRecipient)) return;
          if (!buf_.empty()) first_ = false;
          size_t hold = 0;
          const size_t at = next_start(hold);
          if (at != std::string::npos) {
            content(std::string_view(buf_).substr(0, at));
            buf_.erase(0, at);
            state_ = State::kHeader;
            continue;
          }
          const size_t release = final ? buf_.size() : buf_.size() - hold;
          content(std::string_view(buf_).substr(0, release));
          buf_.erase(0, release);
          return;
        }
        case State::kHeader: {
          const size_t at = buf_.find(kMessage);
          if (at == std::string::npos) {
            if (final) buf_.clear();  // cut off inside a header: no text of it
            return;
          }
          const std::string header = buf_.substr(0, at);
          buf_.erase(0, at + kMessage.size());
          std::string recipient;
          if (const size_t to = header.find(kRecipient); to != std::string::npos) {
            const size_t from = to + kRecipient.size();
            const size_t end = header.find_first_of(" <", from);
            recipient = header.substr(from, end == std::string::npos ? std::string::npos : end - from);
          }
          if (recipient.starts_with(kFunctions) && recipient.size() > kFunctions.size()) {
            begin_args_call(header + std::string(kMessage), recipient.substr(kFunctions.size()));
            state_ = State::kArgs;
          } else {
            state_ = State::kBody;
          }
          continue;
        }
        case State::kArgs: {
          size_t i = 0;
          Step s = Step::kMore;
          while (i < buf_.size() && s == Step::kMore) s = args_byte(buf_[i++]);
          buf_.erase(0, i);
          if (s == Step::kMore) {
            if (final) break_call();
            return;
          }
          state_ = s == Step::kError ? State::kBody : State::kAfterArgs;
          continue;
        }
        case State::kAfterArgs: {
          const size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) buf_.clear();
            return;
          }
          const size_t n = end_marker(std::string_view(buf_).substr(b), final);
          if (n == std::string::npos) return;
          buf_.erase(0, b + n);
          state_ = State::kText;
          continue;
        }
        case State::kBody: {
          size_t at = std::string::npos, len = 0, hold = 0;
          for (std::string_view e : kEnds) {
            const size_t p = buf_.find(e);
            if (p < at) at = p, len = e.size();
            hold = std::max(hold, partial_suffix(buf_, e));
          }
          if (at != std::string::npos) {
            content(std::string_view(buf_).substr(0, at));
            buf_.erase(0, at + len);
            state_ = State::kText;
            continue;
          }
          const size_t release = final ? buf_.size() : buf_.size() - hold;
          content(std::string_view(buf_).substr(0, release));
          buf_.erase(0, release);
          return;
        }
      }
    }
  }

  State state_ = State::kText;
  bool first_ = true;
};

}  // namespace

ToolParserPlugin openai_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<HarmonyParser>(std::move(c)); };
  p.detect = [](std::string_view t) {
    return t.find(kChannel) != std::string_view::npos && t.find(kMessage) != std::string_view::npos;
  };
  p.reads_special_tokens = true;
  return p;
}

}  // namespace tessera::serve
