// Grammar: a context-free grammar over bytes, the one form every structured-output request compiles to.
//
// Rules are lists of alternatives; an alternative is a sequence of elements, each a set of bytes (ByteSet) or a
// reference to a rule, closed by an end marker. All alternatives live in one flat array, so a grammar position is
// a single integer (an index into `elems`): the recognizer (stack.h) keeps stacks of such positions. Code-point
// classes of the syntax tree become small rules over the UTF-8 encodings of their ranges, so a byte-fallback token
// holding half a character is matched like any other: by its bytes.
//
// build_grammar() refuses what the recognizer cannot run and says where: an undefined rule, a rule that can match
// nothing at all, left recursion (a rule that can reach itself without consuming a byte), an empty character
// class, or a grammar beyond the size limits.
//
// Thread-safety: immutable after build_grammar(); share it freely.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/ast.h"
#include "grammar/byte_set.h"

namespace tessera::grammar {

// kBytes: one byte from a set. kUtf8: one character of a code-point class, read a byte at a time through a small
// DFA over its UTF-8 encodings (so a class is one element, not a rule of alternatives). kRule: a rule reference.
// kEnd closes an alternative.
enum class ElemKind : uint8_t { kBytes, kUtf8, kRule, kEnd };

struct Elem {
  ElemKind kind = ElemKind::kEnd;
  uint32_t arg = 0;  // kBytes: index into Grammar::sets; kUtf8: index into Grammar::utf8; kRule: rule id
};

// The byte DFA of a code-point class: next[state][byte] is the next state, kUtf8Done (a whole character read) or
// kUtf8Dead. State 0 is the start.
inline constexpr uint8_t kUtf8Dead = 0xFF, kUtf8Done = 0xFE;
struct Utf8Dfa {
  std::vector<std::array<uint8_t, 256>> next;
  std::vector<CodeRange> ranges;  // for printing
};

// A stack position is an element index, plus (for kUtf8 elements in mid-character) the DFA state in the high bits.
inline constexpr int kSubShift = 24;
inline constexpr uint32_t kElemMask = (1u << kSubShift) - 1;
inline uint32_t elem_of(uint32_t pos) { return pos & kElemMask; }
inline uint32_t sub_of(uint32_t pos) { return pos >> kSubShift; }

struct Rule {
  std::string name;
  uint32_t first_alt = 0;  // alternatives: alts[first_alt, first_alt + num_alts)
  uint32_t num_alts = 0;
};

inline constexpr uint32_t kFrameRoot = 0xFFFFFFFF;     // = kRootParent (stack.h)
inline constexpr uint32_t kFrameUnknown = 0xFFFFFFFE;  // = kBottomParent (stack.h)

struct Grammar {
  std::vector<Elem> elems;     // every alternative of every rule, each closed by kEnd
  std::vector<uint32_t> alts;  // index into elems where each alternative starts
  std::vector<Rule> rules;
  std::vector<ByteSet> sets;  // distinct byte sets (kBytes elements point here)
  std::vector<Utf8Dfa> utf8;  // distinct code-point classes (kUtf8 elements point here)
  uint32_t root = 0;

  // Derived by build_grammar():
  std::vector<uint32_t> rule_of;      // per element: the rule whose alternative holds it
  std::vector<uint8_t> nullable;      // per rule: can match the empty string
  std::vector<uint8_t> reachable;     // per rule: used from the root
  std::vector<std::string> shortest;  // per rule: a shortest text it matches
  // Per rule: the bytes that can come right after a match of the rule, in any context (FOLLOW sets over bytes);
  // follow_end: the rule can end the whole text.
  std::vector<ByteSet> follow;
  std::vector<uint8_t> follow_end;
  // Per rule, what lies below its frame on every stack, as far as the grammar alone decides it: when all the
  // places that call a rule (tail calls reuse the caller's frame) agree, the return positions from the nearest
  // up (frame_returns), then frame_end: kFrameRoot (the stack bottom) or kFrameUnknown (unknown from there: the
  // parent of rule frame_bottom's frame, e.g. a rule used in several places). The token-mask precomputation starts from
  // this known part, so a token that closes a string and goes on is still decided without the real stack.
  std::vector<std::vector<uint32_t>> frame_returns;
  std::vector<uint32_t> frame_end;
  std::vector<uint32_t> frame_bottom;

  const Rule& rule(uint32_t id) const { return rules[id]; }
  // The bytes that can start element `e` (a byte or class element).
  ByteSet first_bytes(const Elem& e) const;
  // A shortest text that completes element `pos` (a byte or class element, maybe in mid-character, or a rule
  // reference) and the rest of its alternative.
  std::string shortest_rest(uint32_t pos) const;
  // A shortest byte string that finishes a character of class `cls` from DFA state `sub`.
  std::string utf8_shortest(uint32_t cls, uint32_t sub) const;
  // A GBNF-like listing, for tests and error messages.
  std::string to_string() const;
};

struct BuildLimits {
  size_t max_elems = 4u << 20;      // grammar size, in elements (at most 1 << kSubShift)
  uint32_t max_repetition = 10000;  // the largest bounded repetition count {m,n}
};

// Lowers `ast` to a byte-level grammar; InvalidArgument naming the rule and its origin for what cannot run.
Result<Grammar> build_grammar(const Ast& ast, const BuildLimits& limits = {});

}  // namespace tessera::grammar
