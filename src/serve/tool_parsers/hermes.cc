// hermes: Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ. Each call is `<tool_call>` + a JSON object {"name", "arguments"}
// + `</tool_call>`, after optional content; the closing tag of the last call may be missing when the reply ends
// right after its object (a stop string, or max_tokens exactly there).
#include <fmt/format.h>

#include "serve/tool_parsers/builtin.h"
#include "serve/tool_parsers/forced_grammar.h"

namespace tessera::serve {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
using Step = JsonScanner::Step;

class HermesParser final : public JsonCallParser {
 public:
  using JsonCallParser::JsonCallParser;

 private:
  enum class State : uint8_t { kText, kObject, kClose };
  void parse(bool final) override {
    for (;;) {
      switch (state_) {
        case State::kText: {
          const size_t at = buf_.find(kOpen);
          if (at != std::string::npos) {
            // Whitespace right before a call is not content.
            const std::string_view before = std::string_view(buf_).substr(0, at);
            const size_t end = before.find_last_not_of(" \t\r\n");
            const size_t keep = end == std::string_view::npos ? 0 : end + 1;
            content(before.substr(0, keep));
            // The whitespace goes with the call: dropped if it completes, given back if it breaks.
            begin_object_call(buf_.substr(keep, at + kOpen.size() - keep));
            buf_.erase(0, at + kOpen.size());
            state_ = State::kObject;
            continue;
          }
          if (final) {
            // Whitespace after the calls is not content either.
            if (completed_calls() > 0 && buf_.find_first_not_of(" \t\r\n") == std::string::npos) buf_.clear();
            return content(std::exchange(buf_, {}));
          }
          // Hold back what may open a call, and the whitespace before it (dropped if a call follows).
          const size_t end = buf_.size() - partial_suffix(buf_, kOpen);
          const size_t last = end == 0 ? std::string::npos : buf_.find_last_not_of(" \t\r\n", end - 1);
          const size_t release = last == std::string::npos ? 0 : last + 1;
          content(std::string_view(buf_).substr(0, release));
          buf_.erase(0, release);
          return;
        }
        case State::kObject: {
          size_t i = 0;
          Step s = Step::kMore;
          while (i < buf_.size() && s == Step::kMore) s = object_byte(buf_[i++]);
          buf_.erase(0, i);
          if (s == Step::kMore) {
            if (final) break_call();
            return;
          }
          if (s == Step::kError) {
            state_ = State::kText;
            continue;
          }
          // The object closed (complete or broken): its closing tag follows.
          state_ = State::kClose;
          continue;
        }
        case State::kClose: {
          const size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) buf_.clear();
            return;
          }
          const std::string_view rest = std::string_view(buf_).substr(b);
          if (rest.starts_with(kClose)) {
            buf_.erase(0, b + kClose.size());
          } else if (is_partial(rest, kClose) && !final) {
            return;
          }
          // Missing or different: what follows is text again.
          state_ = State::kText;
          continue;
        }
      }
    }
  }

  State state_ = State::kText;
};

// Forced calls as the templates ask for them: <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>.
Result<std::string> forced(const std::vector<ToolSpec>& tools, bool parallel) {
  grammar::Ast ast;
  std::vector<grammar::Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    TS_ASSIGN_OR_RETURN(std::string args, parameters_rule(ast, tools[i].parameters, fmt::format("t{}", i)));
    calls.push_back(grammar::Expr::seq(
        {grammar::Expr::lit("<tool_call>\n{\"name\": " + json_quoted(tools[i].name) + ", \"arguments\": "),
         grammar::Expr::ref(args), grammar::Expr::lit("}\n</tool_call>")}));
  }
  return forced_calls_gbnf(std::move(ast), std::move(calls), parallel, "\n");
}

}  // namespace

ToolParserPlugin hermes_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<HermesParser>(std::move(c)); };
  // <tool_call> with a JSON object that has "arguments" (GLM's and Laguna's <arg_key> calls, MiniMax's XML calls
  // use the tag too, in syntaxes of their own).
  p.detect = [](std::string_view t) {
    return t.find(kOpen) != std::string_view::npos && t.find("\"arguments") != std::string_view::npos &&
           t.find("<arg_key>") == std::string_view::npos;
  };
  p.forced_grammar = forced;
  return p;
}

}  // namespace tessera::serve
