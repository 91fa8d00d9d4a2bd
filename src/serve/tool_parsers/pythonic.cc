// pythonic: Llama 3.2 / Llama 4 pythonic tool calling (and other models prompted so). The reply is a Python list
// of calls with keyword arguments, optionally after <|python_tag|>:
//   [get_weather(city="Paris", unit='c'), add(a=1, b=2.5, tags=["x", None])]
// Values are Python literals (python_literal.h), streamed out as JSON as they are read. Whether the reply is calls
// is decided by its first bytes: anything but '[' (or the tag) followed by a name and '(' is content at once.
#include "serve/tool_parsers/builtin.h"
#include "serve/tool_parsers/python_literal.h"

namespace tessera::serve {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9') || c == '.'; }

class PythonicParser final : public ToolParser {
 public:
  using ToolParser::ToolParser;

 private:
  enum class State : uint8_t { kStart, kName, kArgName, kEquals, kValue, kAfterValue, kAfterCall, kContent };

  // The text is not (or no longer) calls: what was read since the last call and all that follows is content.
  void to_content() {
    if (in_call()) break_call();
    content(std::exchange(pending_, {}));
    state_ = State::kContent;
  }

  void parse(bool final) override {
    size_t i = 0;
    for (; i < buf_.size(); ++i) {
      const char c = buf_[i];
      if (in_call())
        raw_ += c;
      else
        pending_ += c;
      switch (state_) {
        case State::kStart: {
          // Whitespace, the tag, then '['.
          if (is_space(c)) break;
          std::string_view tail = std::string_view(pending_).substr(pending_.find_first_not_of(" \t\r\n"));
          if (tail.starts_with(kPythonTag)) {
            tail.remove_prefix(kPythonTag.size());
            const size_t b = tail.find_first_not_of(" \t\r\n");
            tail = b == std::string_view::npos ? std::string_view() : tail.substr(b);
            if (tail.empty()) break;
          } else if (tail.size() < kPythonTag.size() && kPythonTag.starts_with(tail)) {
            break;  // the tag, so far
          }
          if (tail == "[")
            state_ = State::kName;
          else
            to_content();
          break;
        }
        case State::kName:
          if (name_.empty() && is_space(c)) break;
          if (name_.empty() ? ident_start(c) : ident_char(c)) {
            name_ += c;
            break;
          }
          if (c == '(' && !name_.empty()) {
            open_call(pending_);
            pending_.clear();
            start_call(std::exchange(name_, {}));
            call_arguments("{");
            first_arg_ = true;
            state_ = State::kArgName;
            break;
          }
          to_content();
          break;
        case State::kArgName:
          if (arg_.empty() && is_space(c)) break;
          if (arg_.empty() && c == ')') {
            call_arguments("}");
            close_call();
            state_ = State::kAfterCall;
            break;
          }
          if (arg_.empty() ? ident_start(c) : ident_char(c)) {
            arg_ += c;
            break;
          }
          if (!arg_.empty() && c == '=') {
            call_arguments(fmt_key());
            value_ = PyLiteral();
            state_ = State::kValue;
            break;
          }
          if (!arg_.empty() && is_space(c)) {
            state_ = State::kEquals;
            break;
          }
          to_content();
          break;
        case State::kEquals:
          if (is_space(c)) break;
          if (c != '=') {
            to_content();
            break;
          }
          call_arguments(fmt_key());
          value_ = PyLiteral();
          state_ = State::kValue;
          break;
        case State::kValue:
        case State::kAfterValue: {
          std::string out;
          const PyLiteral::Step s = value_.feed(c, out);
          if (s == PyLiteral::Step::kError) {
            to_content();
            break;
          }
          call_arguments(out);
          if (s == PyLiteral::Step::kMore) break;
          // The value ended before c: a comma or the closing parenthesis.
          if (is_space(c)) {
            state_ = State::kAfterValue;
          } else if (c == ',') {
            state_ = State::kArgName;
          } else if (c == ')') {
            call_arguments("}");
            close_call();
            state_ = State::kAfterCall;
          } else {
            to_content();
          }
          break;
        }
        case State::kAfterCall:
          if (is_space(c)) break;
          if (c == ',') {
            state_ = State::kName;
            break;
          }
          if (c == ']') {
            pending_.clear();
            state_ = State::kContent;  // anything after the list is content
            break;
          }
          to_content();
          break;
        case State::kContent:
          pending_.pop_back();
          content(std::string_view(&c, 1));
          break;
      }
    }
    buf_.clear();
    if (final) {
      if (in_call()) break_call();
      content(std::exchange(pending_, {}));
    }
  }

  std::string fmt_key() {
    std::string key = first_arg_ ? "\"" : ", \"";
    first_arg_ = false;
    key += std::exchange(arg_, {});
    key += "\": ";
    return key;
  }

  State state_ = State::kStart;
  std::string pending_;  // text read outside a call that may still open one
  std::string name_, arg_;
  bool first_arg_ = true;
  PyLiteral value_;
};

}  // namespace

ToolParserPlugin pythonic_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<PythonicParser>(std::move(c)); };
  // Templates that ask for [func_name1(params_name1=params_value1, ...)] (vLLM's Llama 3.2 pythonic template).
  p.detect = [](std::string_view t) { return t.find("[func_name1(") != std::string_view::npos; };
  return p;
}

}  // namespace tessera::serve
