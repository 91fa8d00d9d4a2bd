// JsonScanner: checks, one byte at a time, that text is a prefix of one JSON object or array (RFC 8259 syntax:
// strings with their escapes, numbers, literals, nesting), and says when that value is complete. Tool-call parsers
// use it to stream a call's arguments as they are generated: every byte passed on is known to continue a valid
// document, so a client assembling the pieces never holds text that could not become JSON.
//
// It checks syntax only: UTF-8 inside strings is taken as it comes (a finished document is parsed again by a real
// JSON parser before a call is declared complete). Leading whitespace is allowed; nothing may follow the value.
//
// Thread-safety: a value type; one per document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::serve {

class JsonScanner {
 public:
  enum class Step : uint8_t { kMore, kDone, kError };
  // Where the scanner is, for readers that look at the members of the outermost object.
  enum class Mode : uint8_t {
    kStart,         // before the value (whitespace may come)
    kKey,           // expecting a member name (or '}' right after '{')
    kInKey,         // inside a member name
    kColon,         // after a member name
    kValue,         // expecting a value (after ':' or ',' in an array, or '[')
    kInScalar,      // inside a string, number or literal value
    kCommaOrClose,  // after a value inside an object or array
    kDone,
    kError,
  };

  Step feed(char c);
  Mode mode() const { return mode_; }
  // Objects and arrays open at this point ('{' counts from the byte that opens it until the one that closes it).
  int depth() const { return static_cast<int>(stack_.size()); }
  // The innermost open container: '{', '[' or 0.
  char container() const { return stack_.empty() ? 0 : stack_.back(); }

 private:
  enum class Scalar : uint8_t { kNone, kString, kEscape, kHex, kLiteral, kNumber };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
  Step after_value();
  Step structural(char c);
  Step feed_structural(char c);
  bool number_char(char c);  // false: c ends the number (the caller checks the number may end here)
  bool number_may_end() const;

  Mode mode_ = Mode::kStart;
  Scalar scalar_ = Scalar::kNone;
  bool key_ = false;          // the string being read is a member name
  int hex_left_ = 0;          // \uXXXX digits still to come
  std::string literal_left_;  // the rest of true / false / null
  Num num_ = Num::kInt;
  bool first_ = false;  // right after an opening bracket: it may close at once
  std::vector<char> stack_;
};

}  // namespace tessera::serve
