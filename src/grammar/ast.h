// The grammar syntax tree every front end writes (GBNF text, regular expressions, JSON Schema, choice lists):
// named rules whose bodies are sequences, alternatives, literal strings, character classes over Unicode code
// points, references to other rules and bounded or unbounded repetition. build_grammar() (grammar.h) lowers it
// to the byte-level grammar that the recognizer runs.
//
// Each node may carry an `origin`: an index into Ast::origins, a text saying where it came from ("line 3
// column 7", "/properties/name"), so that an error found while building (an undefined rule, left recursion)
// names the place a user can fix.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive code points
};

inline constexpr uint32_t kUnbounded = UINT32_MAX;

struct Expr {
  enum class Kind : uint8_t { kSeq, kAlt, kLiteral, kClass, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  std::string text;               // kLiteral: the UTF-8 bytes to match; kRef: the rule's name
  std::vector<CodeRange> ranges;  // kClass
  bool negated = false;           // kClass: every code point except `ranges`
  std::vector<Expr> items;        // kSeq, kAlt: the parts; kRepeat: the one repeated expression
  uint32_t min = 0, max = 0;      // kRepeat; max kUnbounded for no limit
  uint32_t origin = 0;            // index into Ast::origins (0: unknown)

  static Expr seq(std::vector<Expr> items = {}) {
    Expr e;
    e.kind = Kind::kSeq;
    e.items = std::move(items);
    return e;
  }
  static Expr alt(std::vector<Expr> items) {
    Expr e;
    e.kind = Kind::kAlt;
    e.items = std::move(items);
    return e;
  }
  static Expr lit(std::string bytes) {
    Expr e;
    e.kind = Kind::kLiteral;
    e.text = std::move(bytes);
    return e;
  }
  static Expr cls(std::vector<CodeRange> ranges, bool negated = false) {
    Expr e;
    e.kind = Kind::kClass;
    e.ranges = std::move(ranges);
    e.negated = negated;
    return e;
  }
  static Expr ref(std::string name, uint32_t origin = 0) {
    Expr e;
    e.kind = Kind::kRef;
    e.text = std::move(name);
    e.origin = origin;
    return e;
  }
  static Expr repeat(Expr item, uint32_t min, uint32_t max) {
    Expr e;
    e.kind = Kind::kRepeat;
    e.items.push_back(std::move(item));
    e.min = min;
    e.max = max;
    return e;
  }
  static Expr opt(Expr item) { return repeat(std::move(item), 0, 1); }
  static Expr star(Expr item) { return repeat(std::move(item), 0, kUnbounded); }
  static Expr plus(Expr item) { return repeat(std::move(item), 1, kUnbounded); }
};

struct AstRule {
  std::string name;
  Expr body;
  uint32_t origin = 0;
};

struct Ast {
  std::vector<AstRule> rules;
  std::string root = "root";
  std::vector<std::string> origins = {""};  // origins[0]: unknown

  uint32_t add_origin(std::string where) {
    origins.push_back(std::move(where));
    return static_cast<uint32_t>(origins.size() - 1);
  }
  // Adds a rule; a later rule of the same name replaces the earlier one (as in llama.cpp's GBNF).
  void add(std::string name, Expr body, uint32_t origin = 0) {
    for (AstRule& r : rules) {
      if (r.name == name) {
        r.body = std::move(body);
        r.origin = origin;
        return;
      }
    }
    rules.push_back({std::move(name), std::move(body), origin});
  }
};

}  // namespace tessera::grammar
