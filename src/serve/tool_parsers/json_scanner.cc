#include "serve/tool_parsers/json_scanner.h"

namespace tessera::serve {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

JsonScanner::Step JsonScanner::after_value() {
  scalar_ = Scalar::kNone;
  if (stack_.empty()) {
    mode_ = Mode::kDone;
    return Step::kDone;
  }
  mode_ = Mode::kCommaOrClose;
  return Step::kMore;
}

bool JsonScanner::number_may_end() const {
  return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp;
}

bool JsonScanner::number_char(char c) {
  switch (num_) {
    case Num::kMinus:
      if (c == '0') return num_ = Num::kZero, true;
      if (is_digit(c)) return num_ = Num::kInt, true;
      return false;
    case Num::kZero:
      if (c == '.') return num_ = Num::kDot, true;
      if (c == 'e' || c == 'E') return num_ = Num::kE, true;
      return false;
    case Num::kInt:
      if (is_digit(c)) return true;
      if (c == '.') return num_ = Num::kDot, true;
      if (c == 'e' || c == 'E') return num_ = Num::kE, true;
      return false;
    case Num::kDot:
      if (is_digit(c)) return num_ = Num::kFrac, true;
      return false;
    case Num::kFrac:
      if (is_digit(c)) return true;
      if (c == 'e' || c == 'E') return num_ = Num::kE, true;
      return false;
    case Num::kE:
      if (c == '+' || c == '-') return num_ = Num::kESign, true;
      if (is_digit(c)) return num_ = Num::kExp, true;
      return false;
    case Num::kESign:
      if (is_digit(c)) return num_ = Num::kExp, true;
      return false;
    case Num::kExp:
      return is_digit(c);
  }
  return false;
}

// A byte outside any scalar.
JsonScanner::Step JsonScanner::structural(char c) {
  switch (mode_) {
    case Mode::kStart:
      if (is_space(c)) return Step::kMore;
      if (c == '{' || c == '[') {
        stack_.push_back(c);
        mode_ = c == '{' ? Mode::kKey : Mode::kValue;
        return Step::kMore;
      }
      break;
    case Mode::kKey:
      if (is_space(c)) return Step::kMore;
      if (c == '}' && first_) {  // {}
        stack_.pop_back();
        return after_value();
      }
      if (c == '"') {
        mode_ = Mode::kInKey;
        scalar_ = Scalar::kString;
        key_ = true;
        return Step::kMore;
      }
      break;
    case Mode::kColon:
      if (is_space(c)) return Step::kMore;
      if (c == ':') {
        mode_ = Mode::kValue;
        return Step::kMore;
      }
      break;
    case Mode::kValue:
      if (is_space(c)) return Step::kMore;
      if (c == ']' && first_ && stack_.back() == '[') {  // []
        stack_.pop_back();
        return after_value();
      }
      if (c == '{' || c == '[') {
        stack_.push_back(c);
        mode_ = c == '{' ? Mode::kKey : Mode::kValue;
        return Step::kMore;
      }
      mode_ = Mode::kInScalar;
      key_ = false;
      if (c == '"') {
        scalar_ = Scalar::kString;
        return Step::kMore;
      }
      if (c == '-' || is_digit(c)) {
        scalar_ = Scalar::kNumber;
        num_ = c == '-' ? Num::kMinus : c == '0' ? Num::kZero : Num::kInt;
        return Step::kMore;
      }
      if (c == 't' || c == 'f' || c == 'n') {
        scalar_ = Scalar::kLiteral;
        literal_left_ = c == 't' ? "rue" : c == 'f' ? "alse" : "ull";
        return Step::kMore;
      }
      break;
    case Mode::kCommaOrClose:
      if (is_space(c)) return Step::kMore;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? Mode::kKey : Mode::kValue;
        return Step::kMore;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        return after_value();
      }
      break;
    case Mode::kDone:
      if (is_space(c)) return Step::kDone;
      break;
    default:
      break;
  }
  mode_ = Mode::kError;
  return Step::kError;
}

JsonScanner::Step JsonScanner::feed(char c) {
  if (mode_ == Mode::kError) return Step::kError;
  const unsigned char u = static_cast<unsigned char>(c);
  switch (scalar_) {
    case Scalar::kString:
      if (c == '"') {
        if (key_) {
          key_ = false;
          scalar_ = Scalar::kNone;
          mode_ = Mode::kColon;
          return Step::kMore;
        }
        return after_value();
      }
      if (c == '\\') {
        scalar_ = Scalar::kEscape;
        return Step::kMore;
      }
      if (u < 0x20) break;
      return Step::kMore;
    case Scalar::kEscape:
      if (c == 'u') {
        scalar_ = Scalar::kHex;
        hex_left_ = 4;
        return Step::kMore;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        scalar_ = Scalar::kString;
        return Step::kMore;
      }
      break;
    case Scalar::kHex:
      if (!is_hex(c)) break;
      if (--hex_left_ == 0) scalar_ = Scalar::kString;
      return Step::kMore;
    case Scalar::kLiteral:
      if (literal_left_.empty() || c != literal_left_[0]) break;
      literal_left_.erase(0, 1);
      if (literal_left_.empty()) return after_value();
      return Step::kMore;
    case Scalar::kNumber:
      if (number_char(c)) return Step::kMore;
      if (!number_may_end()) break;
      if (after_value() == Step::kDone) break;  // a number cannot be the outermost value
      return feed_structural(c);
    case Scalar::kNone:
      return feed_structural(c);
  }
  mode_ = Mode::kError;
  return Step::kError;
}

JsonScanner::Step JsonScanner::feed_structural(char c) {
  if (is_space(c)) return structural(c);
  const Step s = structural(c);
  first_ = (c == '{' || c == '[') && s == Step::kMore && scalar_ == Scalar::kNone;
  return s;
}

}  // namespace tessera::serve
