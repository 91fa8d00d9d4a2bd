// llama3_json: Llama 3.1, 3.2 and 3.3 with JSON tool calling. The reply is a call object {"name": "f",
// "parameters": {...}} (or "arguments"), optionally after <|python_tag|> (a special token: spelled for this
// parser), several separated by ';' (or whitespace). Whether a reply is a call is decided by its first bytes:
// anything but '{' or <|python_tag|> is content at once, and an object with another member than name, parameters,
// arguments, type or id is content as soon as that member's name is read.
#include <fmt/format.h>

#include "serve/tool_parsers/builtin.h"
#include "serve/tool_parsers/forced_grammar.h"

namespace tessera::serve {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";
using Step = JsonScanner::Step;

class Llama3JsonParser final : public JsonCallParser {
 public:
  using JsonCallParser::JsonCallParser;

 private:
  enum class State : uint8_t { kStart, kObject, kAfter, kContent };
  void parse(bool final) override {
    for (;;) {
      switch (state_) {
        case State::kStart: {
          // Leading whitespace and the tag, then '{' (a call) or anything else (content).
          size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) return content(std::exchange(buf_, {}));
            return;
          }
          std::string_view rest = std::string_view(buf_).substr(b);
          if (rest.starts_with(kPythonTag)) {
            b = buf_.find_first_not_of(" \t\r\n", b + kPythonTag.size());
            if (b == std::string::npos) {
              if (final) return content(std::exchange(buf_, {}));
              return;
            }
            rest = std::string_view(buf_).substr(b);
          } else if (!final && is_partial(rest, kPythonTag)) {
            return;
          }
          if (rest.front() != '{') {
            state_ = State::kContent;
            continue;
          }
          begin_object_call(std::string_view(buf_).substr(0, b));
          buf_.erase(0, b);
          state_ = State::kObject;
          continue;
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
          state_ = s == Step::kError ? State::kContent : State::kAfter;
          continue;
        }
        case State::kAfter: {
          // Another call after ';' or whitespace; anything else is content.
          size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b != std::string::npos && buf_[b] == ';') b = buf_.find_first_not_of(" \t\r\n", b + 1);
          if (b == std::string::npos) {
            if (final) buf_.clear();
            return;
          }
          if (buf_[b] != '{') {
            state_ = State::kContent;
            continue;
          }
          begin_object_call(std::string_view(buf_).substr(0, b));
          buf_.erase(0, b);
          state_ = State::kObject;
          continue;
        }
        case State::kContent:
          return content(std::exchange(buf_, {}));
      }
    }
  }

  State state_ = State::kStart;
};

// Forced calls as the templates ask for them: {"name": ..., "parameters": ...}, one call (Llama 3.x templates refuse
// a turn with several).
Result<std::string> forced(const std::vector<ToolSpec>& tools, bool) {
  grammar::Ast ast;
  std::vector<grammar::Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    TS_ASSIGN_OR_RETURN(std::string args, parameters_rule(ast, tools[i].parameters, fmt::format("t{}", i)));
    calls.push_back(
        grammar::Expr::seq({grammar::Expr::lit("{\"name\": " + json_quoted(tools[i].name) + ", \"parameters\": "),
                            grammar::Expr::ref(args), grammar::Expr::lit("}")}));
  }
  return forced_calls_gbnf(std::move(ast), std::move(calls), false, "");
}

}  // namespace

ToolParserPlugin llama3_json_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<Llama3JsonParser>(std::move(c)); };
  // Llama 3.x templates: headers, and tool calls as {"name": ..., "parameters": ...} (3.1 and 3.3 also name
  // <|python_tag|>).
  p.detect = [](std::string_view t) {
    return t.find("<|start_header_id|>") != std::string_view::npos &&
           (t.find(kPythonTag) != std::string_view::npos || t.find("\"parameters\"") != std::string_view::npos);
  };
  p.forced_grammar = forced;  // <|python_tag|> is optional: the parser reads calls with or without it spelled
  return p;
}

}  // namespace tessera::serve
