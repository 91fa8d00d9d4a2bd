#include "grammar/gbnf_writer.h"

#include <map>
#include <set>

#include <fmt/format.h>

namespace tessera::grammar {
namespace {

// Code points of UTF-8 text (a byte that does not decode is taken as the code point of its value).
std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) {
      out.push_back(b);
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = ok && (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) {
      out.push_back(b);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

// One code point, escaped where GBNF (in a literal or a class) would read it otherwise.
std::string esc(uint32_t cp) {
  switch (cp) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '"':
    case '\\':
    case '[':
    case ']':
    case '-':
    case '^':
      return std::string("\\") + static_cast<char>(cp);
    default:
      break;
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

class Writer {
 public:
  explicit Writer(const Ast& ast) : ast_(ast) {
    std::set<std::string> taken = {"root"};
    names_[ast.root] = "root";
    for (const AstRule& r : ast.rules) {
      if (r.name == ast.root) continue;
      std::string safe;
      for (char c : r.name)
        safe += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ? c : '-';
      if (safe.empty()) safe = "r";
      std::string name = safe;
      for (int k = 1; !taken.insert(name).second; ++k) name = fmt::format("{}-{}", safe, k);
      names_[r.name] = name;
    }
  }

  std::string write() {
    std::string out;
    for (const AstRule& r : ast_.rules) out += names_[r.name] + " ::= " + expr(r.body, false) + "\n";
    return out;
  }

 private:
  std::string expr(const Expr& e, bool atom) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: {
        std::string s = "\"";
        for (uint32_t cp : code_points(e.text)) s += esc(cp);
        return s + "\"";
      }
      case Expr::Kind::kClass: {
        std::string s = e.negated ? "[^" : "[";
        for (const CodeRange& r : e.ranges) s += r.lo == r.hi ? esc(r.lo) : esc(r.lo) + "-" + esc(r.hi);
        return s + "]";
      }
      case Expr::Kind::kRef: {
        auto it = names_.find(e.text);
        return it != names_.end() ? it->second : e.text;  // an undefined rule stays undefined (build says so)
      }
      case Expr::Kind::kSeq: {
        if (e.items.empty()) return "\"\"";
        if (e.items.size() == 1) return expr(e.items[0], atom);
        std::string s;
        for (const Expr& i : e.items) s += (s.empty() ? "" : " ") + expr(i, true);
        return atom ? "(" + s + ")" : s;
      }
      case Expr::Kind::kAlt: {
        if (e.items.size() == 1) return expr(e.items[0], atom);
        std::string s;
        for (const Expr& i : e.items) s += (s.empty() ? "" : " | ") + expr(i, false);
        return atom ? "(" + s + ")" : s;
      }
      case Expr::Kind::kRepeat: {
        const std::string item = e.items.empty() ? "\"\"" : expr(e.items[0], true);
        std::string suffix;
        if (e.min == 0 && e.max == kUnbounded)
          suffix = "*";
        else if (e.min == 1 && e.max == kUnbounded)
          suffix = "+";
        else if (e.min == 0 && e.max == 1)
          suffix = "?";
        else if (e.max == kUnbounded)
          suffix = fmt::format("{{{},}}", e.min);
        else if (e.min == e.max)
          suffix = fmt::format("{{{}}}", e.min);
        else
          suffix = fmt::format("{{{},{}}}", e.min, e.max);
        return item + suffix;
      }
    }
    return "\"\"";
  }

  const Ast& ast_;
  std::map<std::string, std::string> names_;
};

void rename_refs(Expr& e, const std::map<std::string, std::string>& names) {
  if (e.kind == Expr::Kind::kRef) {
    auto it = names.find(e.text);
    if (it != names.end()) e.text = it->second;
  }
  for (Expr& i : e.items) rename_refs(i, names);
}

// Text over the trie of `tails` (the words without their first character) from `prefix` on: it ends here, or
// goes on along the trie (never completing a word), or leaves it with a character that follows no tail (and then
// anything but `lead`).
Expr segment(const std::vector<std::string>& tails, const std::string& prefix, uint32_t lead) {
  std::set<char> next;
  for (const std::string& t : tails)
    if (t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0) next.insert(t[prefix.size()]);
  std::vector<Expr> alts = {Expr::seq()};
  std::vector<CodeRange> stop = {{lead, lead}};
  for (char c : next) {
    stop.push_back({static_cast<uint8_t>(c), static_cast<uint8_t>(c)});
    const std::string longer = prefix + c;
    bool complete = false;
    for (const std::string& t : tails) complete = complete || t == longer;
    if (!complete) alts.push_back(Expr::seq({Expr::lit(std::string(1, c)), segment(tails, longer, lead)}));
  }
  alts.push_back(Expr::seq({Expr::cls(stop, true), Expr::star(Expr::cls({{lead, lead}}, true))}));
  return Expr::alt(std::move(alts));
}

}  // namespace

std::string write_gbnf(const Ast& ast) { return Writer(ast).write(); }

std::string merge_ast(Ast& into, const Ast& from, std::string_view prefix) {
  std::map<std::string, std::string> names;
  for (const AstRule& r : from.rules) names[r.name] = std::string(prefix) + "-" + r.name;
  for (const AstRule& r : from.rules) {
    Expr body = r.body;
    rename_refs(body, names);
    into.add(names[r.name], std::move(body));
  }
  return names.count(from.root) ? names[from.root] : std::string(prefix) + "-" + from.root;
}

Expr text_without(const std::vector<std::string>& words, bool allow_empty) {
  const uint32_t lead = words.empty() || words[0].empty() ? '<' : static_cast<uint8_t>(words[0][0]);
  std::vector<std::string> tails;
  for (const std::string& w : words) tails.push_back(w.substr(1));
  const Expr other = Expr::cls({{lead, lead}}, true);
  const Expr seg = Expr::seq({Expr::lit(std::string(1, static_cast<char>(lead))), segment(tails, "", lead)});
  if (allow_empty) return Expr::seq({Expr::star(other), Expr::star(seg)});
  return Expr::alt({Expr::seq({Expr::plus(other), Expr::star(seg)}), Expr::plus(seg)});
}

}  // namespace tessera::grammar
