// PyLiteral: a Python literal (str with ' or " quotes and escapes, int, float, True, False, None, list, tuple,
// dict with string keys) read a byte at a time and written out as JSON text as soon as each piece is certain:
// string characters as they come, numbers and names when they end. The pythonic tool-call format writes argument
// values so, and Qwen3-Coder's object values sometimes do.
//
// Thread-safety: a value type; one per literal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::serve {

class PyLiteral {
 public:
  enum class Step : uint8_t {
    kMore,   // consumed; the literal goes on (or is complete, and more may follow it)
    kEnd,    // not consumed: the literal was complete before this byte
    kError,  // not a literal
  };
  // `out` receives JSON text.
  Step feed(char c, std::string& out);
  // The input ended: true when the literal is complete (a number or name at the end is written out then).
  bool finish(std::string& out);

 private:
  enum class Expect : uint8_t { kValue, kKey, kColon, kCommaOrClose };
  bool start_value(char c, std::string& out);
  bool end_token(std::string& out);  // a number or name ended
  bool close(char c, std::string& out);
  void separator(std::string& out);
  void value_done();

  enum class Token : uint8_t { kNone, kString, kEscape, kHex, kNumber, kName };
  Token token_ = Token::kNone;
  char quote_ = 0;
  std::string text_;  // a number or name read so far; an escape's digits
  int hex_left_ = 0;
  bool key_ = false;    // the string is a dict key
  bool comma_ = false;  // a ',' was read: the next element writes it
  bool done_ = false;
  bool opened_ = false;  // right after an opening bracket: it may close at once
  Expect expect_ = Expect::kValue;
  std::vector<char> stack_;  // '[', '(' (both JSON arrays) and '{'
};

}  // namespace tessera::serve
