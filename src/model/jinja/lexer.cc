#include "model/jinja/lexer.h"

#include <fmt/format.h>

#include "model/jinja/text.h"

namespace tessera::model::jinja {
namespace {

// Preprocessed text with, for each byte, the line of the original source it came from.
struct Source {
  std::string text;
  std::vector<int> line;
  void push(char c, int l) {
    text += c;
    line.push_back(l);
  }
};

bool is_line_start(const Source& s, size_t i) { return i == 0 || s.text[i - 1] == '\n' || s.text[i - 1] == '\r'; }

Source preprocess(std::string_view raw) {
  if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
  Source a;
  int line = 1;
  for (char c : raw) {
    a.push(c, line);
    if (c == '\n') ++line;
  }
  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
  Source b;
  for (size_t i = 0; i < a.text.size();) {
    if (is_line_start(a, i)) {
      size_t j = i;
      while (j < a.text.size() && (a.text[j] == ' ' || a.text[j] == '\t')) ++j;
      if (j > i && j + 1 < a.text.size() && a.text[j] == '{' &&
          (a.text[j + 1] == '#' || a.text[j + 1] == '%' || a.text[j + 1] == '-')) {
        i = j;
      }
    }
    b.push(a.text[i], a.line[i]);
    ++i;
  }
  // trim_blocks: /([#%-]})\n/g -> "$1"
  Source c;
  for (size_t i = 0; i < b.text.size();) {
    const char ch = b.text[i];
    if ((ch == '#' || ch == '%' || ch == '-') && i + 2 < b.text.size() && b.text[i + 1] == '}' &&
        b.text[i + 2] == '\n') {
      c.push(ch, b.line[i]);
      c.push('}', b.line[i + 1]);
      i += 3;
      continue;
    }
    c.push(ch, b.line[i]);
    ++i;
  }
  // /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" : after)
  Source d;
  const std::string& t = c.text;
  size_t ws_start = 0;  // start of the whitespace run that ends at i (not part of an earlier match)
  bool in_ws = false;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 2, "{%") == 0) {
      size_t j = i + 2;
      const bool lstrip = j < t.size() && t[j] == '-';
      if (lstrip) ++j;
      while (size_t n = js_space_len(t, j)) j += n;
      if (t.compare(j, 3, "end") == 0 && t.compare(j + 3, 10, "generation") == 0) j += 3;
      if (t.compare(j, 10, "generation") == 0) {
        j += 10;
        while (size_t n = js_space_len(t, j)) j += n;
        const bool rstrip = j < t.size() && t[j] == '-';
        if (rstrip) ++j;
        if (t.compare(j, 2, "%}") == 0) {
          j += 2;
          if (lstrip && in_ws) {  // drop the whitespace already copied
            size_t keep = d.text.size() - (i - ws_start);
            d.text.resize(keep);
            d.line.resize(keep);
          }
          size_t after = j;
          while (size_t n = js_space_len(t, after)) after += n;
          if (!rstrip)
            for (size_t k = j; k < after; ++k) d.push(t[k], c.line[k]);
          i = after;
          in_ws = false;
          continue;
        }
      }
    }
    if (size_t n = js_space_len(t, i)) {
      if (!in_ws) ws_start = i;
      in_ws = true;
      for (size_t k = 0; k < n; ++k) d.push(t[i + k], c.line[i + k]);
      i += n;
      continue;
    }
    in_ws = false;
    d.push(t[i], c.line[i]);
    ++i;
  }
  return d;
}

bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

struct Mapping {
  const char* seq;
  Tok type;
};
// Longest first where one is a prefix of another, as the reference's ordered table.
constexpr Mapping kMappings[] = {
    {"{%", Tok::kOpenStatement},  {"%}", Tok::kCloseStatement},
    {"{{", Tok::kOpenExpression}, {"}}", Tok::kCloseExpression},
    {"(", Tok::kOpenParen},       {")", Tok::kCloseParen},
    {"{", Tok::kOpenCurly},       {"}", Tok::kCloseCurly},
    {"[", Tok::kOpenSquare},      {"]", Tok::kCloseSquare},
    {",", Tok::kComma},           {".", Tok::kDot},
    {":", Tok::kColon},           {"|", Tok::kPipe},
    {"<=", Tok::kComparison},     {">=", Tok::kComparison},
    {"==", Tok::kComparison},     {"!=", Tok::kComparison},
    {"<", Tok::kComparison},      {">", Tok::kComparison},
    {"+", Tok::kAdditive},        {"-", Tok::kAdditive},
    {"~", Tok::kAdditive},        {"**", Tok::kPower},
    {"*", Tok::kMultiplicative},  {"//", Tok::kMultiplicative},
    {"/", Tok::kMultiplicative},  {"%", Tok::kMultiplicative},
    {"=", Tok::kEquals},
};

class Lexer {
 public:
  explicit Lexer(Source s) : s_(std::move(s)), src_(s_.text) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      Status st = step();
      if (!st.ok()) return st;
    }
    return std::move(tokens_);
  }

 private:
  int line_at(size_t i) const {
    if (s_.line.empty()) return 1;
    return s_.line[std::min(i, s_.line.size() - 1)];
  }
  Status error(std::string msg) const { return invalid_argument(fmt::format("line {}: {}", line_at(pos_), msg)); }
  void push(Tok t, std::string v, size_t at) { tokens_.push_back({t, std::move(v), line_at(at)}); }
  Tok last() const { return tokens_.empty() ? Tok::kText : tokens_.back().type; }

  // Consumes while `pred` holds, decoding backslash escapes (the reference does so for every run; only
  // string literals contain backslashes in practice).
  template <typename Pred>
  Result<std::string> consume_while(Pred pred) {
    std::string out;
    while (pos_ < src_.size() && pred(src_[pos_])) {
      if (src_[pos_] == '\\') {
        ++pos_;
        if (pos_ >= src_.size()) return error("unexpected end of input inside a string");
        char e = src_[pos_++];
        if (e == 'x' || e == 'u') {
          size_t n = e == 'x' ? 2 : 4;
          std::string hex = src_.substr(pos_, n);
          if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            return error(fmt::format("invalid escape \\{}{}", e, hex));
          append_utf8(out, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += n;
          continue;
        }
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          default:
            return error(fmt::format("unexpected escaped character '{}'", e));
        }
        continue;
      }
      out += src_[pos_++];
      if (pos_ >= src_.size()) return error("unexpected end of the template (an unterminated string?)");
    }
    return out;
  }

  void strip_trailing_whitespace() {
    if (!tokens_.empty() && tokens_.back().type == Tok::kText) {
      std::string& v = tokens_.back().value;
      v = std::string(js_trim_end(v));
      if (v.empty()) tokens_.pop_back();
    }
  }
  void skip_leading_whitespace() {
    while (size_t n = js_space_len(src_, pos_)) pos_ += n;
  }

  Status step() {
    const bool after_block =
        tokens_.empty() || last() == Tok::kCloseStatement || last() == Tok::kCloseExpression || last() == Tok::kComment;
    if (after_block) {
      size_t start = pos_;
      while (pos_ < src_.size() && !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
                                     (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#'))) {
        ++pos_;
      }
      if (pos_ > start) {
        push(Tok::kText, src_.substr(start, pos_ - start), start);
        return ok_status();
      }
    }
    if (src_.compare(pos_, 2, "{#") == 0) {
      size_t start = pos_;
      pos_ += 2;
      const bool strip_before = pos_ < src_.size() && src_[pos_] == '-';
      if (strip_before) ++pos_;
      std::string comment;
      while (!(pos_ + 1 < src_.size() && src_[pos_] == '#' && src_[pos_ + 1] == '}')) {
        if (pos_ + 2 >= src_.size()) return error("missing the end of a comment ('#}')");
        comment += src_[pos_++];
      }
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) comment.pop_back();
      if (strip_before) strip_trailing_whitespace();
      push(Tok::kComment, comment, start);
      pos_ += 2;
      if (strip_after) skip_leading_whitespace();
      return ok_status();
    }
    if (src_.compare(pos_, 3, "{%-") == 0) {
      strip_trailing_whitespace();
      push(Tok::kOpenStatement, "{%", pos_);
      pos_ += 3;
      return ok_status();
    }
    if (src_.compare(pos_, 3, "{{-") == 0) {
      strip_trailing_whitespace();
      push(Tok::kOpenExpression, "{{", pos_);
      curly_depth_ = 0;
      pos_ += 3;
      return ok_status();
    }
    skip_leading_whitespace();
    if (pos_ >= src_.size()) return ok_status();
    if (src_.compare(pos_, 3, "-%}") == 0) {
      push(Tok::kCloseStatement, "%}", pos_);
      pos_ += 3;
      skip_leading_whitespace();
      return ok_status();
    }
    if (src_.compare(pos_, 3, "-}}") == 0) {
      push(Tok::kCloseExpression, "}}", pos_);
      pos_ += 3;
      skip_leading_whitespace();
      return ok_status();
    }
    const char ch = src_[pos_];
    if (ch == '-' || ch == '+') {
      if (tokens_.empty() || last() == Tok::kText) return error(fmt::format("unexpected character '{}'", ch));
      switch (last()) {
        case Tok::kIdentifier:
        case Tok::kNumber:
        case Tok::kString:
        case Tok::kCloseParen:
        case Tok::kCloseSquare:
          break;  // a binary operator
        default: {
          size_t start = pos_++;
          TS_ASSIGN_OR_RETURN(std::string num, consume_while(is_digit));
          if (!num.empty() && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            ++pos_;
            TS_ASSIGN_OR_RETURN(std::string frac, consume_while(is_digit));
            num += "." + frac;
          }
          push(num.empty() ? Tok::kUnary : Tok::kNumber, std::string(1, ch) + num, start);
          return ok_status();
        }
      }
    }
    for (const Mapping& m : kMappings) {
      std::string_view seq = m.seq;
      if (seq == "}}" && curly_depth_ > 0) continue;
      if (src_.compare(pos_, seq.size(), seq) == 0) {
        push(m.type, std::string(seq), pos_);
        if (m.type == Tok::kOpenExpression) curly_depth_ = 0;
        if (m.type == Tok::kOpenCurly) ++curly_depth_;
        if (m.type == Tok::kCloseCurly) --curly_depth_;
        pos_ += seq.size();
        return ok_status();
      }
    }
    if (ch == '\'' || ch == '"') {
      size_t start = pos_++;
      TS_ASSIGN_OR_RETURN(std::string str, consume_while([ch](char c) { return c != ch; }));
      if (pos_ >= src_.size()) {
        pos_ = start;
        return error("unterminated string literal");
      }
      push(Tok::kString, std::move(str), start);
      ++pos_;
      return ok_status();
    }
    if (is_digit(ch)) {
      size_t start = pos_;
      TS_ASSIGN_OR_RETURN(std::string num, consume_while(is_digit));
      if (last() != Tok::kDot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
        ++pos_;
        TS_ASSIGN_OR_RETURN(std::string frac, consume_while(is_digit));
        num += "." + frac;
      }
      push(Tok::kNumber, std::move(num), start);
      return ok_status();
    }
    if (is_word(ch)) {
      size_t start = pos_;
      TS_ASSIGN_OR_RETURN(std::string word, consume_while(is_word));
      push(Tok::kIdentifier, std::move(word), start);
      return ok_status();
    }
    return error(fmt::format("unexpected character '{}'", ch));
  }

  Source s_;
  const std::string& src_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  Lexer lexer(preprocess(source));
  return lexer.run();
}

}  // namespace tessera::model::jinja
