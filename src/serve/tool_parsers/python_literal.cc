#include "serve/tool_parsers/python_literal.h"

#include <cctype>
#include <regex>

#include <fmt/format.h>

namespace tessera::serve {
namespace {

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool number_start(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.'; }
bool number_char(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '_' || c == '+' ||
         c == '-';
}

}  // namespace

void PyLiteral::separator(std::string& out) {
  if (comma_) out += ", ";
  comma_ = false;
  opened_ = false;
}

bool PyLiteral::start_value(char c, std::string& out) {
  separator(out);
  if (c == '\'' || c == '"') {
    out += '"';
    token_ = Token::kString;
    quote_ = c;
    return true;
  }
  if (c == '[' || c == '(' || c == '{') {
    out += c == '{' ? '{' : '[';
    stack_.push_back(c);
    expect_ = c == '{' ? Expect::kKey : Expect::kValue;
    opened_ = true;
    return true;
  }
  if (number_start(c)) {
    token_ = Token::kNumber;
    text_.assign(1, c);
    return true;
  }
  if (name_start(c)) {
    token_ = Token::kName;
    text_.assign(1, c);
    return true;
  }
  return false;
}

void PyLiteral::value_done() {
  token_ = Token::kNone;
  opened_ = false;
  if (key_) {
    key_ = false;
    expect_ = Expect::kColon;
  } else if (stack_.empty()) {
    done_ = true;
  } else {
    expect_ = Expect::kCommaOrClose;
  }
}

bool PyLiteral::end_token(std::string& out) {
  if (token_ == Token::kName) {
    if (text_ == "True")
      out += "true";
    else if (text_ == "False")
      out += "false";
    else if (text_ == "None")
      out += "null";
    else
      return false;
    value_done();
    return true;
  }
  std::string n;
  for (char c : text_)
    if (c != '_') n += c;
  if (!n.empty() && n[0] == '+') n.erase(0, 1);
  const size_t digits = n.starts_with('-') ? 1 : 0;
  if (n.size() > digits && n[digits] == '.') n.insert(digits, "0");
  if (const size_t dot = n.find('.'); dot != std::string::npos && (dot + 1 == n.size() || !std::isdigit(n[dot + 1])))
    n.insert(dot + 1, "0");
  // Python allows leading zeros only in 0 itself; JSON's grammar is the check.
  static const std::regex kNumber(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  if (!std::regex_match(n, kNumber)) return false;
  out += n;
  value_done();
  return true;
}

bool PyLiteral::close(char c, std::string& out) {
  if (stack_.empty()) return false;
  const char open = stack_.back();
  if (!((open == '[' && c == ']') || (open == '(' && c == ')') || (open == '{' && c == '}'))) return false;
  stack_.pop_back();
  out += open == '{' ? '}' : ']';
  comma_ = false;
  key_ = false;
  value_done();
  return true;
}

PyLiteral::Step PyLiteral::feed(char c, std::string& out) {
  const unsigned char u = static_cast<unsigned char>(c);
  switch (token_) {
    case Token::kString:
      if (c == '\\') {
        token_ = Token::kEscape;
        return Step::kMore;
      }
      if (c == quote_) {
        out += '"';
        value_done();
        return Step::kMore;
      }
      if (c == '\n') return Step::kError;  // a one-line string
      if (c == '"')
        out += "\\\"";
      else if (u < 0x20)
        out += fmt::format("\\u{:04x}", u);
      else
        out += c;
      return Step::kMore;
    case Token::kEscape:
      token_ = Token::kString;
      switch (c) {
        case 'n':
          out += "\\n";
          break;
        case 't':
          out += "\\t";
          break;
        case 'r':
          out += "\\r";
          break;
        case 'b':
          out += "\\b";
          break;
        case 'f':
          out += "\\f";
          break;
        case '0':
          out += "\\u0000";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '"':
          out += "\\\"";
          break;
        case '\'':
          out += '\'';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
          token_ = Token::kHex;
          hex_left_ = c == 'x' ? 2 : 4;
          text_.clear();
          break;
        default:  // Python keeps an unknown escape's backslash
          out += "\\\\";
          if (u < 0x20) return Step::kError;
          out += c;
      }
      return Step::kMore;
    case Token::kHex:
      if (!std::isxdigit(u)) return Step::kError;
      text_ += c;
      if (--hex_left_ == 0) {
        out += "\\u" + std::string(4 - text_.size(), '0') + text_;
        token_ = Token::kString;
      }
      return Step::kMore;
    case Token::kNumber:
    case Token::kName:
      if (token_ == Token::kNumber ? number_char(c) : name_char(c)) {
        text_ += c;
        return Step::kMore;
      }
      if (!end_token(out)) return Step::kError;
      break;
    case Token::kNone:
      break;
  }
  if (done_) return Step::kEnd;
  if (space(c)) return Step::kMore;
  switch (expect_) {
    case Expect::kValue:
      if ((c == ']' || c == ')') && (comma_ || opened_)) return close(c, out) ? Step::kMore : Step::kError;
      return start_value(c, out) ? Step::kMore : Step::kError;
    case Expect::kKey:
      if (c == '}' && (comma_ || opened_)) return close(c, out) ? Step::kMore : Step::kError;
      if (c != '\'' && c != '"') return Step::kError;
      separator(out);
      out += '"';
      token_ = Token::kString;
      quote_ = c;
      key_ = true;
      return Step::kMore;
    case Expect::kColon:
      if (c != ':') return Step::kError;
      out += ": ";
      expect_ = Expect::kValue;
      return Step::kMore;
    case Expect::kCommaOrClose:
      if (c == ',') {
        comma_ = true;
        expect_ = stack_.back() == '{' ? Expect::kKey : Expect::kValue;
        return Step::kMore;
      }
      return close(c, out) ? Step::kMore : Step::kError;
  }
  return Step::kError;
}

bool PyLiteral::finish(std::string& out) {
  if ((token_ == Token::kNumber || token_ == Token::kName) && stack_.empty() && !end_token(out)) return false;
  return done_;
}

}  // namespace tessera::serve
