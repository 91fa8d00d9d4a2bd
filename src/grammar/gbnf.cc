#include "grammar/gbnf.h"

#include <fmt/core.h>

#include "grammar/utf8_ranges.h"

namespace tessera::grammar {

std::string line_column(std::string_view text, size_t at) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return fmt::format("line {} column {}", line, col);
}

namespace {

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : s_(text) {}

  Result<Ast> run() {
    skip_space(true);
    while (ok() && i_ < s_.size()) parse_rule();
    if (!status_.ok()) return status_;
    if (ast_.rules.empty()) return invalid_argument("the grammar is empty: it needs at least a 'root ::= ...' rule");
    return std::move(ast_);
  }

 private:
  bool ok() const { return status_.ok(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }

  void fail(size_t at, std::string what) {
    if (!status_.ok()) return;
    std::string near;
    for (size_t k = at; k < s_.size() && k < at + 20 && s_[k] != '\n'; ++k) near += s_[k];
    status_ =
        invalid_argument(fmt::format("{}: {}{}", line_column(s_, at), what,
                                     near.empty() ? std::string(" (at the end)") : fmt::format(" at '{}'", near)));
  }

  void skip_space(bool newline_ok) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\r' && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (i_ < s_.size() && is_word(s_[i_])) ++i_;
    if (i_ == start) fail(start, "expecting a rule name");
    return std::string(s_.substr(start, i_ - start));
  }

  uint32_t origin(size_t at) { return ast_.add_origin(line_column(s_, at)); }

  void parse_rule() {
    const size_t start = i_;
    std::string name = parse_name();
    if (!ok()) return;
    skip_space(false);
    if (s_.substr(i_, 3) != "::=") return fail(i_, "expecting '::='");
    i_ += 3;
    skip_space(true);
    Expr body = parse_alternates(false);
    if (!ok()) return;
    if (peek() == '\r') {
      i_ += peek(1) == '\n' ? 2 : 1;
    } else if (peek() == '\n') {
      ++i_;
    } else if (!at_end()) {
      return fail(i_, "expecting a newline or the end");
    }
    skip_space(true);
    ast_.add(std::move(name), std::move(body), origin(start));
  }

  Expr parse_alternates(bool nested) {
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(nested));
    while (ok() && peek() == '|') {
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return Expr::alt(std::move(alts));
  }

  // One character of a literal or class, escapes decoded; 0xFFFFFFFF on error.
  uint32_t parse_char() {
    const size_t start = i_;
    if (peek() == '\\') {
      const char e = peek(1);
      i_ += 2;
      auto hex = [&](int n) -> uint32_t {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          const char c = peek();
          int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
          if (d < 0) {
            fail(start, fmt::format("expecting {} hex digits", n));
            return 0xFFFFFFFF;
          }
          v = v * 16 + static_cast<uint32_t>(d);
          ++i_;
        }
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
          fail(start, "not a Unicode scalar value");
          return 0xFFFFFFFF;
        }
        return v;
      };
      switch (e) {
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '/':
        case '^':
          return static_cast<uint8_t>(e);
        default:
          fail(start, "unknown escape");
          return 0xFFFFFFFF;
      }
    }
    if (at_end()) {
      fail(start, "unexpected end of the grammar");
      return 0xFFFFFFFF;
    }
    return next_code_point(s_, i_);
  }

  Expr parse_sequence(bool nested) {
    std::vector<Expr> items;
    while (ok() && !at_end()) {
      const size_t start = i_;
      const char c = peek();
      if (c == '"') {
        ++i_;
        std::string bytes;
        while (ok() && peek() != '"') {
          if (at_end()) {
            fail(start, "unterminated string literal");
            break;
          }
          const uint32_t cp = parse_char();
          if (ok()) append_utf8(cp, bytes);
        }
        ++i_;
        items.push_back(Expr::lit(std::move(bytes)));
      } else if (c == '[') {
        ++i_;
        bool negated = false;
        if (peek() == '^') {
          negated = true;
          ++i_;
        }
        std::vector<CodeRange> ranges;
        while (ok() && peek() != ']') {
          if (at_end()) {
            fail(start, "unterminated character class");
            break;
          }
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (ok() && peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
            ++i_;
            hi = parse_char();
            if (ok() && hi < lo) fail(start, "a character range whose end is below its start");
          }
          ranges.push_back({lo, hi});
        }
        ++i_;
        Expr e = Expr::cls(std::move(ranges), negated);
        e.origin = origin(start);
        items.push_back(std::move(e));
      } else if (c == '<' || c == '!') {
        fail(start, "token terminals (<...>, <[id]>, !<...>) are not supported: use the token's text as a literal");
      } else if (is_word(c)) {
        std::string name = parse_name();
        items.push_back(Expr::ref(std::move(name), origin(start)));
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        Expr inner = parse_alternates(true);
        if (ok() && peek() != ')') fail(i_, "expecting ')'");
        ++i_;
        items.push_back(std::move(inner));
      } else if (c == '.') {
        ++i_;
        items.push_back(Expr::cls({}, true));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) {
          fail(start, "a repetition operator with nothing before it to repeat");
          break;
        }
        uint32_t min = 0, max = kUnbounded;
        if (c == '*') {
          ++i_;
        } else if (c == '+') {
          min = 1;
          ++i_;
        } else if (c == '?') {
          max = 1;
          ++i_;
        } else {
          ++i_;
          skip_space(nested);
          if (!parse_count(min)) break;
          skip_space(nested);
          if (peek() == '}') {
            max = min;
          } else if (peek() == ',') {
            ++i_;
            skip_space(nested);
            if (is_digit(peek()) && !parse_count(max)) break;
            skip_space(nested);
            if (peek() != '}') {
              fail(i_, "expecting '}'");
              break;
            }
          } else {
            fail(i_, "expecting ',' or '}'");
            break;
          }
          ++i_;
        }
        Expr rep = Expr::repeat(std::move(items.back()), min, max);
        rep.origin = origin(start);
        items.back() = std::move(rep);
      } else {
        break;
      }
      skip_space(nested);
    }
    if (items.size() == 1) return std::move(items[0]);
    return Expr::seq(std::move(items));
  }

  bool parse_count(uint32_t& out) {
    const size_t start = i_;
    uint64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > 1000000) {
        fail(start, "a repetition count above 1000000");
        return false;
      }
      ++i_;
    }
    if (i_ == start) {
      fail(start, "expecting a number");
      return false;
    }
    out = static_cast<uint32_t>(v);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  Ast ast_;
  Status status_;
};

}  // namespace

Result<Ast> parse_gbnf(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace tessera::grammar
