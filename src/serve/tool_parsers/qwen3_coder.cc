// qwen3_coder: Qwen3-Coder, Qwen3.5, Nemotron 3 Nano and other templates with XML-style calls:
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   </function>
//   </tool_call>
// A value is the text between its tags less one leading and one trailing newline, typed by the tool's parameter
// schema: a string parameter's text is the string (streamed as it is generated); integer, number, boolean and null
// parameters are read as JSON when they are one (as text otherwise, so nothing is lost); object and array values are
// JSON or Python literals; a parameter the schema does not list, or a tool the request does not offer, gives text.
// A value ends at `</parameter>`, or at the next `<parameter=` or `</function>` when the model left it open.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "grammar/gbnf_writer.h"
#include "serve/tool_parsers/builtin.h"
#include "serve/tool_parsers/forced_grammar.h"
#include "serve/tool_parsers/python_literal.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::ordered_json;
constexpr std::string_view kToolCall = "<tool_call>", kToolCallEnd = "</tool_call>",
                           kFunction = "<function=", kFunctionEnd = "</function>",
                           kParameter = "<parameter=", kParameterEnd = "</parameter>";
constexpr std::array<std::string_view, 4> kValueEnds = {kParameterEnd, kParameter, kFunctionEnd, kToolCallEnd};

std::string json_string(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The JSON types a parameter's schema allows ("" in the set: any).
std::vector<std::string> schema_types(const Json& s) {
  std::vector<std::string> out;
  if (!s.is_object()) return {""};
  if (s.contains("type")) {
    if (s["type"].is_string()) out.push_back(s["type"].get<std::string>());
    if (s["type"].is_array())
      for (const Json& t : s["type"])
        if (t.is_string()) out.push_back(t.get<std::string>());
  } else if (s.contains("enum") && s["enum"].is_array()) {
    for (const Json& v : s["enum"])
      out.push_back(v.is_string()    ? "string"
                    : v.is_boolean() ? "boolean"
                    : v.is_null()    ? "null"
                    : v.is_number()  ? "number"
                                     : "object");
  } else if (s.contains("const")) {
    out.push_back(s["const"].is_string() ? "string" : "");
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key) && s[key].is_array())
      for (const Json& b : s[key])
        for (std::string& t : schema_types(b)) out.push_back(std::move(t));
  if (out.empty()) out.push_back("");
  return out;
}

bool allows(const std::vector<std::string>& types, std::string_view t) {
  for (const std::string& x : types)
    if (x == t || x.empty() || (t == "integer" && x == "number")) return true;
  return false;
}

// A value's text as JSON, by the parameter's types.
std::string typed(std::string_view text, const std::vector<std::string>& types) {
  const bool only_string = types.size() == 1 && types[0] == "string";
  if (!only_string) {
    const Json v = Json::parse(text, nullptr, false);
    if (!v.is_discarded()) {
      const std::string_view t = v.is_string()           ? "string"
                                 : v.is_boolean()        ? "boolean"
                                 : v.is_null()           ? "null"
                                 : v.is_number_integer() ? "integer"
                                 : v.is_number()         ? "number"
                                 : v.is_array()          ? "array"
                                                         : "object";
      if (allows(types, t)) return v.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    if (allows(types, "boolean") && (text == "True" || text == "False")) return text == "True" ? "true" : "false";
    if (allows(types, "object") || allows(types, "array")) {
      PyLiteral lit;
      std::string out;
      bool ok = true;
      for (char c : text) {
        if (lit.feed(c, out) != PyLiteral::Step::kMore) {
          ok = false;
          break;
        }
      }
      if (ok && lit.finish(out)) return out;
    }
  }
  return json_string(text);
}

class Qwen3CoderParser final : public ToolParser {
 public:
  using ToolParser::ToolParser;

 private:
  enum class State : uint8_t { kText, kFunction, kName, kParams, kParamName, kValue, kClose };

  // Reads `marker` at the front of buf_ after whitespace: 1 read (consumed into raw_), 0 not there, -1 not known yet.
  int expect(std::string_view marker, bool final) {
    const size_t b = buf_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return final ? 0 : -1;
    const std::string_view rest = std::string_view(buf_).substr(b);
    if (rest.starts_with(marker)) {
      raw_ += buf_.substr(0, b + marker.size());
      buf_.erase(0, b + marker.size());
      return 1;
    }
    return !final && is_partial(rest, marker) ? -1 : 0;
  }

  // A tag's name up to '>' (consumed into raw_): 1 read, 0 not a name, -1 not known yet.
  int tag_name(std::string& out, bool final) {
    const size_t gt = buf_.find('>');
    const size_t nl = buf_.find('\n');
    if (gt == std::string::npos || nl < gt) return nl != std::string::npos || final || buf_.size() > 256 ? 0 : -1;
    out = buf_.substr(0, gt);
    raw_ += buf_.substr(0, gt + 1);
    buf_.erase(0, gt + 1);
    while (!out.empty() && is_space(out.back())) out.pop_back();
    return out.empty() ? 0 : 1;
  }

  void broken() {
    break_call();
    state_ = State::kText;
  }

  void parse(bool final) override {
    for (;;) {
      switch (state_) {
        case State::kText: {
          size_t at = std::string::npos, hold = 0;
          std::string_view marker;
          for (std::string_view m : {kToolCall, kFunction}) {
            const size_t p = buf_.find(m);
            if (p < at) at = p, marker = m;
            hold = std::max(hold, partial_suffix(buf_, m));
          }
          if (at != std::string::npos) {
            const std::string_view before = std::string_view(buf_).substr(0, at);
            const size_t end = before.find_last_not_of(" \t\r\n");
            const size_t keep = end == std::string_view::npos ? 0 : end + 1;
            content(before.substr(0, keep));
            open_call(buf_.substr(keep, at + marker.size() - keep));  // the whitespace goes with the call
            buf_.erase(0, at + marker.size());
            state_ = marker == kToolCall ? State::kFunction : State::kName;
            continue;
          }
          if (final) {
            if (completed_calls() > 0 && buf_.find_first_not_of(" \t\r\n") == std::string::npos) buf_.clear();
            return content(std::exchange(buf_, {}));
          }
          const size_t stop = buf_.size() - hold;
          const size_t last = stop == 0 ? std::string::npos : buf_.find_last_not_of(" \t\r\n", stop - 1);
          const size_t release = last == std::string::npos ? 0 : last + 1;
          content(std::string_view(buf_).substr(0, release));
          buf_.erase(0, release);
          return;
        }
        case State::kFunction: {
          const int r = expect(kFunction, final);
          if (r < 0) return;
          if (r == 0) {
            broken();
            continue;
          }
          state_ = State::kName;
          continue;
        }
        case State::kName: {
          std::string name;
          const int r = tag_name(name, final);
          if (r < 0) return;
          if (r == 0) {
            broken();
            continue;
          }
          const ToolSpec* tool = context_.find(name);
          properties_ = tool != nullptr && tool->parameters.is_object() && tool->parameters.contains("properties")
                            ? tool->parameters["properties"]
                            : Json::object();
          start_call(std::move(name));
          call_arguments("{");
          first_param_ = true;
          state_ = State::kParams;
          continue;
        }
        case State::kParams: {
          int r = expect(kParameter, final);
          if (r > 0) {
            state_ = State::kParamName;
            continue;
          }
          const bool maybe = r < 0;
          r = expect(kFunctionEnd, final);
          if (r == 0) r = expect(kToolCallEnd, final);  // the function left open
          if (r > 0) {
            call_arguments("}");
            close_call();
            state_ = State::kClose;
            continue;
          }
          if (r < 0 || maybe) {
            if (final)
              broken();
            else
              return;
            continue;
          }
          broken();
          continue;
        }
        case State::kParamName: {
          std::string param;
          const int r = tag_name(param, final);
          if (r < 0) return;
          if (r == 0) {
            broken();
            continue;
          }
          types_ = properties_.contains(param) ? schema_types(properties_[param]) : std::vector<std::string>{"string"};
          streamed_ = types_.size() == 1 && types_[0] == "string";
          call_arguments((first_param_ ? "" : ", ") + json_string(param) + ": " + (streamed_ ? "\"" : ""));
          first_param_ = false;
          value_.clear();
          lead_ = true;
          state_ = State::kValue;
          continue;
        }
        case State::kValue: {
          if (lead_ && !buf_.empty()) {
            lead_ = false;
            if (buf_[0] == '\n') raw_ += '\n', buf_.erase(0, 1);
          }
          size_t at = std::string::npos, hold = 0;
          std::string_view end;
          for (std::string_view e : kValueEnds) {
            const size_t p = buf_.find(e);
            if (p < at) at = p, end = e;
            hold = std::max(hold, partial_suffix(buf_, e));
          }
          if (at == std::string::npos && final) {
            raw_ += buf_;
            buf_.clear();
            broken();
            continue;
          }
          const size_t take = at != std::string::npos ? at : buf_.size() - hold;
          // One newline before the closing tag is not part of the value: hold a trailing one back.
          size_t text = take;
          if (at != std::string::npos) {
            if (text > 0 && buf_[text - 1] == '\n') --text;
          } else if (text > 0 && buf_[text - 1] == '\n') {
            --text;
          }
          const std::string piece = buf_.substr(0, text);
          raw_ += piece;
          if (streamed_) {
            const std::string quoted = json_string(piece);
            call_arguments(std::string_view(quoted).substr(1, quoted.size() - 2));
          } else {
            value_ += piece;
          }
          buf_.erase(0, text);
          if (at == std::string::npos) return;
          // The value is complete (buf_ holds the newline, if any, and the tag).
          if (!buf_.empty() && buf_[0] == '\n') raw_ += '\n', buf_.erase(0, 1);
          if (end == kParameterEnd) raw_ += buf_.substr(0, end.size()), buf_.erase(0, end.size());
          call_arguments(streamed_ ? std::string("\"") : typed(value_, types_));
          state_ = State::kParams;
          continue;
        }
        case State::kClose: {
          const int r = expect(kToolCallEnd, final);
          if (r < 0) return;
          state_ = State::kText;
          continue;
        }
      }
    }
  }

  State state_ = State::kText;
  Json properties_;
  std::vector<std::string> types_;
  bool streamed_ = false, lead_ = false, first_param_ = true;
  std::string value_;
};

// Forced calls in the XML the template asks for. A parameter the schema types as a plain string is free text (in
// which no closing tag occurs), or one of its enum/const values; any other parameter is the JSON its schema allows
// (the parser reads it back as JSON). A string constrained otherwise (pattern, format, lengths) cannot be written
// as raw text by this grammar: such tools use the JSON form (FailedPrecondition).
Result<std::string> forced(const std::vector<ToolSpec>& tools, bool parallel) {
  using grammar::Expr;
  grammar::Ast ast;
  const std::vector<std::string> ends(kValueEnds.begin(), kValueEnds.end());
  ast.add("text", grammar::text_without(ends));
  std::vector<Expr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& params = tools[i].parameters;
    const Json props = params.is_object() && params.contains("properties") && params["properties"].is_object()
                           ? params["properties"]
                           : Json::object();
    std::vector<std::string> required;
    if (params.is_object() && params.contains("required") && params["required"].is_array())
      for (const Json& r : params["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    std::vector<Expr> body = {Expr::lit("<tool_call>\n<function=" + tools[i].name + ">\n")};
    size_t k = 0;
    for (const auto& [name, schema] : props.items()) {
      if (name.find_first_of(">\n") != std::string::npos)
        return failed_precondition("a parameter name the XML form cannot write");
      Expr value;
      const std::vector<std::string> types = schema_types(schema);
      if (types.size() == 1 && types[0] == "string") {
        for (const char* key : {"pattern", "format", "minLength", "maxLength"})
          if (schema.contains(key)) return failed_precondition(fmt::format("'{}' on a string parameter", key));
        std::vector<Expr> values;
        const Json listed = schema.contains("enum")    ? schema["enum"]
                            : schema.contains("const") ? Json::array({schema["const"]})
                                                       : Json();
        if (listed.is_array()) {
          for (const Json& v : listed) {
            const std::string text = v.get<std::string>();
            for (std::string_view e : kValueEnds)
              if (text.find(e) != std::string::npos) return failed_precondition("an enum value with a closing tag");
            values.push_back(Expr::lit(text));
          }
          value = Expr::alt(std::move(values));
        } else {
          value = Expr::ref("text");
        }
      } else {
        Json sub = schema;
        for (const char* defs : {"$defs", "definitions"})
          if (params.contains(defs)) sub[defs] = params[defs];
        TS_ASSIGN_OR_RETURN(std::string rule, parameters_rule(ast, sub, fmt::format("t{}-p{}", i, k)));
        value = Expr::ref(rule);
      }
      Expr item = Expr::seq({Expr::lit("<parameter=" + name + ">\n"), std::move(value), Expr::lit("\n</parameter>\n")});
      const bool must = std::find(required.begin(), required.end(), name) != required.end();
      body.push_back(must ? std::move(item) : Expr::opt(std::move(item)));
      ++k;
    }
    body.push_back(Expr::lit("</function>\n</tool_call>"));
    calls.push_back(Expr::seq(std::move(body)));
  }
  return forced_calls_gbnf(std::move(ast), std::move(calls), parallel, "\n");
}

}  // namespace

ToolParserPlugin qwen3_coder_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<Qwen3CoderParser>(std::move(c)); };
  p.detect = [](std::string_view t) {
    return t.find(kToolCall) != std::string_view::npos && t.find(kFunction) != std::string_view::npos &&
           t.find(kParameter) != std::string_view::npos;
  };
  p.forced_grammar = forced;
  return p;
}

}  // namespace tessera::serve
