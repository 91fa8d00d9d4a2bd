// What the JSON-writing families share: call objects and argument objects read byte by byte (builtin.h), marker
// helpers, and the parser of forced calls in the grammar's JSON form (serve/forced_tools.h).
#include <utility>

#include "serve/tool_parsers/builtin.h"

namespace tessera::serve {

using Json = nlohmann::ordered_json;
using Step = JsonScanner::Step;
using Mode = JsonScanner::Mode;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t partial_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

bool is_partial(std::string_view text, std::string_view marker) {
  return !text.empty() && text.size() < marker.size() && marker.starts_with(text);
}

Step CallObjectReader::feed(char c) {
  const Mode before = scan_.mode();
  const int depth = scan_.depth();
  const Step s = scan_.feed(c);
  if (s == Step::kError) return s;
  if (before == Mode::kStart && c == '[') return Step::kError;  // a call is an object
  if (depth == 1 && before == Mode::kKey && scan_.mode() == Mode::kInKey) {
    key_.assign(1, '"');
  } else if (depth == 1 && before == Mode::kInKey) {
    key_ += c;
    if (scan_.mode() == Mode::kColon) {
      const Json k = Json::parse(key_, nullptr, false);
      const std::string key = k.is_string() ? k.get<std::string>() : std::string();
      member_ = key == "name"                               ? Member::kName
                : key == "arguments" || key == "parameters" ? Member::kArguments
                : key == "id"                               ? Member::kId
                : key == "type"                             ? Member::kType
                                                            : Member::kNone;
      if (member_ == Member::kNone) return Step::kError;
    }
  } else if (depth == 1 && before == Mode::kValue && !is_space(c)) {
    in_value_ = true;
    value_.assign(1, c);
    args_string_ = c == '"';
    if (member_ == Member::kArguments && c == '{')
      args_ += c;
    else if (c != '"')
      return Step::kError;  // names, ids and types are strings; arguments an object or a string
  } else if (in_value_) {
    if (member_ == Member::kArguments && !args_string_)
      args_ += c;
    else
      value_ += c;
  }
  if (in_value_ && scan_.depth() == 1 && scan_.mode() == Mode::kCommaOrClose) {
    in_value_ = false;
    if (member_ == Member::kArguments && !args_string_) return s;
    const Json v = Json::parse(value_, nullptr, false);
    if (!v.is_string()) return Step::kError;
    if (member_ == Member::kName) {
      name_ = v.get<std::string>();
      has_name_ = !name_.empty();
      if (!has_name_) return Step::kError;
    } else if (member_ == Member::kId) {
      id_ = v.get<std::string>();
    } else if (member_ == Member::kArguments) {  // a JSON document in a string
      const std::string inner = v.get<std::string>();
      if (!Json::parse(inner, nullptr, false).is_object()) return Step::kError;
      args_ += inner;
    }
  }
  return s;
}

void JsonCallParser::begin_object_call(std::string_view marker) {
  open_call(marker);
  object_ = CallObjectReader();
}

Step JsonCallParser::object_byte(char c) {
  raw_ += c;
  const Step s = object_.feed(c);
  if (s == Step::kError) {
    break_call();
    return s;
  }
  if (!call_started() && object_.has_name()) start_call(object_.name(), object_.id());
  if (call_started()) call_arguments(object_.take_arguments());
  if (s == Step::kDone) {
    close_call();
    return s;
  }
  return Step::kMore;
}

void JsonCallParser::begin_args_call(std::string_view marker, std::string name, std::string id) {
  open_call(marker);
  start_call(std::move(name), std::move(id));
  args_scan_ = JsonScanner();
}

Step JsonCallParser::args_byte(char c) {
  raw_ += c;
  const bool leading = args_scan_.mode() == Mode::kStart;
  const Step s = args_scan_.feed(c);
  if (s == Step::kError || (leading && c == '[')) {
    break_call();
    return Step::kError;
  }
  if (!(leading && is_space(c))) call_arguments(std::string_view(&c, 1));
  if (s == Step::kDone) close_call();
  return s;
}

namespace {

// Forced calls in the grammar's JSON form: the named function's arguments object, or an array of
// {"name", "parameters"} objects. The grammar makes every byte valid; a reply cut short breaks the last call.
class ForcedJsonParser final : public JsonCallParser {
 public:
  ForcedJsonParser(ToolParserContext context, std::string function)
      : JsonCallParser(std::move(context)), function_(std::move(function)) {}

 private:
  enum class State : uint8_t { kStart, kArgs, kArrayOpen, kElement, kAfterElement, kDone };
  void parse(bool final) override {
    for (const char c : buf_) {
      switch (state_) {
        case State::kStart:
          if (is_space(c)) {
            frame_ += c;
            break;
          }
          if (!function_.empty()) {
            begin_args_call(std::exchange(frame_, {}), function_);
            state_ = args_byte(c) == Step::kMore ? State::kArgs : State::kDone;
          } else if (c == '[') {
            frame_ += c;
            state_ = State::kArrayOpen;
          } else {
            content(std::exchange(frame_, {}) + c);
            state_ = State::kDone;
          }
          break;
        case State::kArgs:
          if (args_byte(c) != Step::kMore) state_ = State::kDone;
          break;
        case State::kArrayOpen:
          if (is_space(c)) {
            frame_ += c;
            break;
          }
          begin_object_call(std::exchange(frame_, {}));
          state_ = object_byte(c) == Step::kMore ? State::kElement : State::kAfterElement;
          break;
        case State::kElement:
          if (object_byte(c) != Step::kMore) state_ = State::kAfterElement;
          break;
        case State::kAfterElement:
          if (is_space(c)) break;
          if (c == ',') {
            frame_ += c;
            state_ = State::kArrayOpen;
          } else {
            if (c != ']') content(std::string_view(&c, 1));
            state_ = State::kDone;
          }
          break;
        case State::kDone:
          if (!is_space(c)) content(std::string_view(&c, 1));
          break;
      }
    }
    buf_.clear();
    if (final && completed_calls() == 0) content(std::exchange(frame_, {}));  // never a call: all of it is text
  }

  std::string function_;
  std::string frame_;  // the array's brackets, commas and spaces before the next call
  State state_ = State::kStart;
};

}  // namespace

std::unique_ptr<ToolParser> make_forced_json_parser(ToolParserContext context, std::string forced_function) {
  return std::make_unique<ForcedJsonParser>(std::move(context), std::move(forced_function));
}

}  // namespace tessera::serve
