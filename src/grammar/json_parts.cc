#include "grammar/json_parts.h"

#include <algorithm>
#include <map>

#include <fmt/core.h>

#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace tessera::grammar::json {
namespace {

Expr chars(std::vector<CodeRange> r, bool negated = false) { return Expr::cls(std::move(r), negated); }
Expr digit() { return chars({{'0', '9'}}); }
Expr hex_digit() { return chars({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}); }

std::string pow10_minus1(int digits) { return std::string(static_cast<size_t>(digits), '9'); }

// Decimal strings of equal length lo <= hi: the usual digit-by-digit split.
Expr same_length(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return Expr::seq();
  const size_t rest = lo.size() - 1;
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) return Expr::seq({Expr::lit(std::string(1, lo[0])), same_length(lo_rest, hi_rest)});
  const bool lo_zeros = lo_rest == std::string(rest, '0');
  const bool hi_nines = hi_rest == std::string(rest, '9');
  std::vector<Expr> alts;
  char from = lo[0], to = hi[0];
  if (!lo_zeros) {
    alts.push_back(Expr::seq({Expr::lit(std::string(1, lo[0])), same_length(lo_rest, std::string(rest, '9'))}));
    ++from;
  }
  if (!hi_nines) --to;
  if (from <= to) {
    alts.push_back(Expr::seq({chars({{static_cast<uint32_t>(from), static_cast<uint32_t>(to)}}),
                              Expr::repeat(digit(), static_cast<uint32_t>(rest), static_cast<uint32_t>(rest))}));
  }
  if (!hi_nines) {
    alts.push_back(Expr::seq({Expr::lit(std::string(1, hi[0])), same_length(std::string(rest, '0'), hi_rest)}));
  }
  return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
}

// Non-negative integers in [lo, hi], without leading zeros.
Expr nonneg_range(uint64_t lo, uint64_t hi) {
  std::vector<Expr> alts;
  const std::string hs = std::to_string(hi);
  for (size_t len = std::to_string(lo).size(); len <= hs.size(); ++len) {
    const uint64_t first = len == 1 ? 0 : static_cast<uint64_t>(std::stoull("1" + std::string(len - 1, '0')));
    const uint64_t last = static_cast<uint64_t>(std::stoull(pow10_minus1(static_cast<int>(len))));
    const uint64_t a = std::max(lo, first), b = std::min(hi, last);
    if (a > b) continue;
    std::string as = std::to_string(a), bs = std::to_string(b);
    alts.push_back(same_length(as, bs));
  }
  return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
}

constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 digits

}  // namespace

Expr string_char() {
  // \uXXXX without surrogates: first digit not D, or D followed by 0-7.
  Expr u = Expr::seq(
      {Expr::lit("u"), Expr::alt({Expr::seq({chars({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}),
                                             Expr::repeat(hex_digit(), 3, 3)}),
                                  Expr::seq({chars({{'D', 'D'}, {'d', 'd'}}), chars({{'0', '7'}}),
                                             Expr::repeat(hex_digit(), 2, 2)})})});
  Expr escape = Expr::seq(
      {Expr::lit("\\"),
       Expr::alt(
           {chars({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
            std::move(u)})});
  return Expr::alt({plain_string_char(), std::move(escape)});
}

Expr plain_string_char() { return chars({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true); }

Expr integer_expr() {
  return Expr::seq({Expr::opt(Expr::lit("-")),
                    Expr::alt({Expr::lit("0"), Expr::seq({chars({{'1', '9'}}), Expr::repeat(digit(), 0, 15)})})});
}

Expr number_expr() {
  return Expr::seq({integer_expr(), Expr::opt(Expr::seq({Expr::lit("."), Expr::repeat(digit(), 1, 16)})),
                    Expr::opt(Expr::seq({chars({{'E', 'E'}, {'e', 'e'}}), Expr::opt(chars({{'+', '+'}, {'-', '-'}})),
                                         Expr::repeat(digit(), 1, 2)}))});
}

std::optional<std::string> format_regex(const std::string& format) {
  // Each a subset of what the format allows (RFC 3339, RFC 5321, ...): whatever is generated validates.
  static const std::string kDate =
      R"(\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8])))";
  static const std::string kTime =
      R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
  static const std::string kLabel = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?)";
  static const std::string kHost = kLabel + R"((?:\.)" + kLabel + "){0,3}";
  static const std::map<std::string, std::string> kFormats = {
      {"date", kDate},
      {"time", kTime},
      {"date-time", kDate + "T" + kTime},
      {"duration", R"(P(?:\d{1,4}[YMWD]|\d{1,4}DT\d{1,4}[HMS]|T\d{1,4}[HMS]))"},
      {"email", R"([A-Za-z0-9_+-]{1,32}(?:\.[A-Za-z0-9_+-]{1,32}){0,3}@)" + kHost + R"(\.[A-Za-z]{2,10})"},
      {"hostname", kHost},
      {"ipv4", R"((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      {"ipv6", R"([0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){7})"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"uri", R"((?:https?|ftp)://)" + kHost + R"((?:/[A-Za-z0-9._~-]{0,32}){0,8})"},
  };
  auto it = kFormats.find(format);
  if (it == kFormats.end()) return std::nullopt;
  return it->second;
}

Expr json_encoded(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: {
      std::vector<Expr> parts;
      std::string plain;
      for (char c : e.text) {
        const auto b = static_cast<uint8_t>(c);
        std::string esc;
        if (c == '"')
          esc = "\\\"";
        else if (c == '\\')
          esc = "\\\\";
        else if (c == '\n')
          esc = "\\n";
        else if (c == '\t')
          esc = "\\t";
        else if (c == '\r')
          esc = "\\r";
        else if (c == '\b')
          esc = "\\b";
        else if (c == '\f')
          esc = "\\f";
        else if (b < 0x20)
          esc = fmt::format("\\u{:04x}", b);
        if (esc.empty()) {
          plain += c;
        } else {
          plain += esc;
        }
      }
      return Expr::lit(plain);
    }
    case Expr::Kind::kClass: {
      // The characters JSON writes as themselves, plus an escape for each that it must escape.
      std::vector<CodeRange> r = normalize_ranges(e.ranges, e.negated);
      std::vector<Expr> alts;
      std::vector<CodeRange> keep;
      for (const CodeRange& x : r) {
        for (uint32_t lo = x.lo; lo <= x.hi;) {
          if (lo < 0x20 || lo == '"' || lo == '\\') {
            alts.push_back(json_encoded(Expr::lit(std::string(1, static_cast<char>(lo)))));
            ++lo;
            continue;
          }
          uint32_t hi = x.hi;
          if (lo < '"' && hi >= '"') hi = '"' - 1;
          if (lo < '\\' && hi >= '\\') hi = '\\' - 1;
          keep.push_back({lo, hi});
          lo = hi + 1;
          if (hi == kMaxCodePoint) break;
        }
      }
      if (!keep.empty()) alts.insert(alts.begin(), Expr::cls(std::move(keep)));
      Expr out = alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
      out.origin = e.origin;
      return out;
    }
    case Expr::Kind::kRef:
      return e;
    default: {
      Expr out = e;
      for (Expr& c : out.items) c = json_encoded(c);
      return out;
    }
  }
}

Result<Expr> integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t a = std::max<int64_t>(lo.value_or(-kMaxMagnitude), -kMaxMagnitude);
  const int64_t b = std::min<int64_t>(hi.value_or(kMaxMagnitude), kMaxMagnitude);
  if (a > b) return invalid_argument(fmt::format("no integer lies in [{}, {}]", a, b));
  std::vector<Expr> alts;
  if (a < 0) {
    // -n for n in [max(1, -b), -a]
    const uint64_t nlo = static_cast<uint64_t>(std::max<int64_t>(1, -b));
    const uint64_t nhi = static_cast<uint64_t>(-a);
    if (nlo <= nhi) alts.push_back(Expr::seq({Expr::lit("-"), nonneg_range(nlo, nhi)}));
  }
  if (b >= 0) alts.push_back(nonneg_range(static_cast<uint64_t>(std::max<int64_t>(a, 0)), static_cast<uint64_t>(b)));
  return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
}

namespace {

struct KeyTrie {
  std::map<uint32_t, KeyTrie> next;
  bool end = false;
};

Expr not_in(const KeyTrie& t) {
  // Strings that leave the trie at some character, or stop at a node that ends no name.
  std::vector<Expr> alts;
  if (!t.end) alts.push_back(Expr::seq());
  std::vector<CodeRange> taken;
  for (const auto& [cp, child] : t.next) {
    taken.push_back({cp, cp});
    std::string b;
    append_utf8(cp, b);
    alts.push_back(Expr::seq({Expr::lit(b), not_in(child)}));
  }
  taken.push_back({'"', '"'});
  taken.push_back({'\\', '\\'});
  taken.push_back({0, 0x1F});
  alts.push_back(Expr::seq({Expr::cls(std::move(taken), true), Expr::star(plain_string_char())}));
  return alts.size() == 1 ? std::move(alts[0]) : Expr::alt(std::move(alts));
}

}  // namespace

Expr key_not_in(const std::vector<std::string>& names) {
  KeyTrie root;
  for (const std::string& n : names) {
    KeyTrie* t = &root;
    for (size_t i = 0; i < n.size();) t = &t->next[next_code_point(n, i)];
    t->end = true;
  }
  return not_in(root);
}

}  // namespace tessera::grammar::json
