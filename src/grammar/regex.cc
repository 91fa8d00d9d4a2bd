#include "grammar/regex.h"

#include <fmt/core.h>

#include "grammar/utf8_ranges.h"

namespace tessera::grammar {
namespace {

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodeRange> kSpace = {{'\t', '\r'}, {' ', ' '}};
// Line terminators, which `.` does not match in ECMAScript.
const std::vector<CodeRange> kLineEnd = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

// ASCII characters outside `set`: the negated shorthands, kept to ASCII so that they mean the same in every
// dialect (Python's \W also excludes non-ASCII letters).
std::vector<CodeRange> ascii_complement(const std::vector<CodeRange>& set) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const CodeRange& r : set) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x7F) out.push_back({next, 0x7F});
  return out;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : s_(p) {}

  Result<Expr> run() {
    if (peek() == '^') ++i_;
    Expr e = parse_alt();
    if (ok() && i_ < s_.size()) fail(i_, peek() == ')' ? "unbalanced ')'" : "unexpected character");
    if (!status_.ok()) return status_;
    return e;
  }

 private:
  bool ok() const { return status_.ok(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }
  void fail(size_t at, std::string what) {
    if (status_.ok()) status_ = invalid_argument(fmt::format("regex column {}: {} (in '{}')", at + 1, what, s_));
  }

  Expr parse_alt() {
    std::vector<Expr> alts;
    alts.push_back(parse_seq());
    while (ok() && peek() == '|') {
      ++i_;
      alts.push_back(parse_seq());
    }
    if (alts.size() == 1) return std::move(alts[0]);
    return Expr::alt(std::move(alts));
  }

  Expr parse_seq() {
    std::vector<Expr> items;
    while (ok() && !at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        // Only at the very end (or before the end of a top-level alternative).
        if (i_ + 1 == s_.size() || ((peek(1) == '|') && depth_ == 0)) {
          ++i_;
          continue;
        }
        fail(i_, "'$' is only supported at the end");
        break;
      }
      if (peek() == '^') {
        if (items.empty() && depth_ == 0) {
          ++i_;
          continue;
        }
        fail(i_, "'^' is only supported at the start");
        break;
      }
      Expr atom = parse_atom();
      if (!ok()) break;
      parse_quantifiers(atom);
      items.push_back(std::move(atom));
    }
    if (items.size() == 1) return std::move(items[0]);
    return Expr::seq(std::move(items));
  }

  void parse_quantifiers(Expr& atom) {
    bool quantified = false;
    while (ok() && !at_end()) {
      const size_t start = i_;
      uint32_t min = 0, max = kUnbounded;
      const char c = peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{' && parse_braces(min, max)) {
        // parsed
      } else {
        return;
      }
      if (peek() == '?') {
        ++i_;  // lazy: the same language
      } else if (peek() == '+') {
        return fail(i_, "possessive quantifiers are not supported");
      }
      if (quantified) return fail(start, "a quantifier cannot follow a quantifier");
      quantified = true;
      atom = Expr::repeat(std::move(atom), min, max);
    }
  }

  // {n}, {n,}, {n,m}; false (and nothing consumed) when the brace is a literal, as ECMAScript and Python read it.
  bool parse_braces(uint32_t& min, uint32_t& max) {
    size_t j = i_ + 1;
    auto number = [&](uint32_t& out) {
      const size_t start = j;
      uint64_t v = 0;
      while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9') {
        v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(s_[j] - '0'), 100000000);
        ++j;
      }
      out = static_cast<uint32_t>(v);
      return j > start;
    };
    if (!number(min)) return false;
    if (j < s_.size() && s_[j] == '}') {
      max = min;
    } else if (j < s_.size() && s_[j] == ',') {
      ++j;
      if (!number(max)) max = kUnbounded;
      if (j >= s_.size() || s_[j] != '}') return false;
    } else {
      return false;
    }
    i_ = j + 1;
    return true;
  }

  Expr parse_atom() {
    const size_t start = i_;
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (peek() == '?') {
        if (peek(1) == ':') {
          i_ += 2;
        } else if (peek(1) == 'P' && peek(2) == '<') {
          skip_group_name(i_ + 3);
        } else if (peek(1) == '<' && peek(2) != '=' && peek(2) != '!') {
          skip_group_name(i_ + 2);
        } else if (peek(1) == '=' || peek(1) == '!' || peek(1) == '<') {
          fail(start, "lookaround assertions are not supported");
          return {};
        } else {
          fail(start, "inline flags and other (?...) groups are not supported");
          return {};
        }
      }
      ++depth_;
      Expr inner = parse_alt();
      --depth_;
      if (ok() && peek() != ')') fail(start, "unbalanced '('");
      ++i_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++i_;
      return Expr::cls(kLineEnd, true);
    }
    if (c == '\\') return parse_escape(false, nullptr);
    if (c == '*' || c == '+' || c == '?') {
      fail(start, "a quantifier with nothing before it to repeat");
      return {};
    }
    if (c == '{') {
      uint32_t a, b;
      const size_t save = i_;
      if (parse_braces(a, b)) {
        i_ = save;
        fail(start, "a quantifier with nothing before it to repeat");
        return {};
      }
    }
    const uint32_t cp = next_code_point(s_, i_);
    std::string bytes;
    append_utf8(cp, bytes);
    return Expr::lit(std::move(bytes));
  }

  void skip_group_name(size_t from) {
    size_t j = from;
    while (j < s_.size() && s_[j] != '>') ++j;
    if (j >= s_.size()) return fail(i_, "unterminated group name");
    i_ = j + 1;
  }

  // An escape at i_. Inside a class (`in_class`), a shorthand adds its ranges to `ranges`; outside it becomes
  // an expression.
  Expr parse_escape(bool in_class, std::vector<CodeRange>* ranges) {
    const size_t start = i_;
    const char e = peek(1);
    i_ += 2;
    auto shorthand = [&](const std::vector<CodeRange>& set) -> Expr {
      if (in_class) {
        ranges->insert(ranges->end(), set.begin(), set.end());
        return {};
      }
      return Expr::cls(set);
    };
    switch (e) {
      case 'd':
        return shorthand(kDigit);
      case 'D':
        return shorthand(ascii_complement(kDigit));
      case 'w':
        return shorthand(kWord);
      case 'W':
        return shorthand(ascii_complement(kWord));
      case 's':
        return shorthand(kSpace);
      case 'S':
        return shorthand(ascii_complement(kSpace));
      case 'b':
        if (in_class) return single(0x08, in_class, ranges);
        fail(start, "word boundaries (\\b) are not supported");
        return {};
      case 'B':
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        fail(start, fmt::format("the assertion \\{} is not supported", e));
        return {};
      case 't':
        return single('\t', in_class, ranges);
      case 'n':
        return single('\n', in_class, ranges);
      case 'r':
        return single('\r', in_class, ranges);
      case 'f':
        return single('\f', in_class, ranges);
      case 'v':
        return single('\v', in_class, ranges);
      case '0':
        return single(0, in_class, ranges);
      case 'x':
        return single(hex(2, start), in_class, ranges);
      case 'u':
        if (peek() == '{') {
          ++i_;
          uint32_t v = 0;
          size_t n = 0;
          while (ok() && peek() != '}' && !at_end()) {
            v = v * 16 + hex(1, start);
            if (++n > 6) fail(start, "\\u{...} holds at most 6 hex digits");
          }
          ++i_;
          if (v > kMaxCodePoint) fail(start, "not a Unicode code point");
          return single(v, in_class, ranges);
        }
        return single(hex(4, start), in_class, ranges);
      case '\0':
        fail(start, "a trailing backslash");
        return {};
      default:
        if (e >= '1' && e <= '9') {
          fail(start, "backreferences are not supported");
          return {};
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          fail(start, fmt::format("unknown escape \\{}", e));
          return {};
        }
        // Escaped punctuation (or a non-ASCII character) stands for itself.
        i_ -= 1;
        return single(next_code_point(s_, i_), in_class, ranges);
    }
  }

  uint32_t hex(int n, size_t start) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) {
        fail(start, "expecting hex digits");
        return 0;
      }
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  Expr single(uint32_t cp, bool in_class, std::vector<CodeRange>* ranges) {
    if (in_class) {
      ranges->push_back({cp, cp});
      return {};
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      fail(i_, "a lone surrogate cannot be matched in UTF-8");
      return {};
    }
    std::string bytes;
    append_utf8(cp, bytes);
    return Expr::lit(std::move(bytes));
  }

  Expr parse_class() {
    const size_t start = i_;
    ++i_;
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++i_;
    }
    std::vector<CodeRange> ranges;
    bool first = true;
    while (ok()) {
      if (at_end()) {
        fail(start, "unterminated character class");
        break;
      }
      if (peek() == ']' && !first) break;
      if (peek() == '[' && peek(1) == ':') {
        fail(i_, "POSIX classes ([:alpha:]) are not supported");
        break;
      }
      first = false;
      // One member: a character (maybe the start of a range) or a shorthand.
      uint32_t lo;
      if (peek() == '\\') {
        const size_t before = ranges.size();
        parse_escape(true, &ranges);
        if (!ok()) break;
        if (ranges.size() != before + 1 || ranges.back().lo != ranges.back().hi || is_shorthand(i_ - 2)) continue;
        lo = ranges.back().lo;
        ranges.pop_back();
      } else {
        lo = next_code_point(s_, i_);
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
        ++i_;
        if (peek() == '\\') {
          const size_t before = ranges.size();
          parse_escape(true, &ranges);
          if (!ok()) break;
          if (ranges.size() != before + 1 || ranges.back().lo != ranges.back().hi) {
            fail(i_, "a range cannot end in a shorthand class");
            break;
          }
          hi = ranges.back().lo;
          ranges.pop_back();
        } else {
          hi = next_code_point(s_, i_);
        }
        if (hi < lo) {
          fail(start, "a character range whose end is below its start");
          break;
        }
      }
      ranges.push_back({lo, hi});
    }
    ++i_;
    if (ok() && !negated && ranges.empty()) fail(start, "an empty character class");
    return Expr::cls(std::move(ranges), negated);
  }

  // Whether the escape ending before `end` was a shorthand (\d \w \s and negations) rather than one character.
  bool is_shorthand(size_t at) const {
    if (at + 1 >= s_.size() || s_[at] != '\\') return false;
    const char e = s_[at + 1];
    return e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
  }

  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
  Status status_;
};

}  // namespace

Result<Expr> parse_regex(std::string_view pattern) { return RegexParser(pattern).run(); }

Result<Ast> regex_grammar(std::string_view pattern) {
  TS_ASSIGN_OR_RETURN(Expr e, parse_regex(pattern));
  Ast ast;
  ast.add("root", std::move(e));
  return ast;
}

}  // namespace tessera::grammar
