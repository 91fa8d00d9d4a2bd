// StackMachine: the pushdown automaton that runs a Grammar over bytes.
//
// A parse is a set of stacks of grammar positions (the element each stack is at, and below it where to return
// when the current rule's alternative ends). Stacks are persistent and hash-consed: a node is (position, parent
// node), stored once, so stacks that share a tail share memory, and two stacks are equal exactly when their top
// node ids are. A state is the sorted set of top node ids, each at a byte element, plus two flags: kAccept (a
// stack has ended the whole grammar: end of text is allowed) and kBottom (a stack has returned below the
// "unknown" parent that the token-mask precomputation starts from). States are interned to ids, and step(state,
// byte) is cached, so the machine turns itself into a DFA over the states it actually meets: inside a JSON
// string, the state after any ordinary character is the state before it, and the step is one hash lookup.
//
// A rule reference in tail position pushes no return node (the parent is reused), so right recursion such as
// `S ::= x S | ` runs in constant stack depth.
//
// Thread-safety: none. The token-mask precomputation owns one while it compiles; each Matcher owns its own.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/flat_map.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

using StateId = uint32_t;
inline constexpr StateId kDeadState = 0;                  // no stack left
inline constexpr uint32_t kRootParent = kFrameRoot;       // below the root: popping it ends the text
inline constexpr uint32_t kBottomParent = kFrameUnknown;  // an unknown rest of stack (mask precomputation)

enum StateFlag : uint8_t { kAccept = 1, kBottom = 2 };

struct StackNode {
  uint32_t pos;     // index into Grammar::elems (with a kUtf8 element's DFA state in the high bits)
  uint32_t parent;  // node id, kRootParent or kBottomParent
};

class StackMachine {
 public:
  explicit StackMachine(const Grammar& g);

  // The state before any byte: every alternative of the root rule, expanded.
  StateId start();
  // A state of one stack whose top is `pos` (a byte element) over `parent`.
  StateId singleton(uint32_t pos, uint32_t parent);
  // The state after reading `b`; kDeadState when no stack can read it.
  StateId step(StateId s, uint8_t b);

  std::span<const uint32_t> tops(StateId s) const {
    const StateRec& r = states_[s];
    return {pool_.data() + r.begin, r.count};
  }
  uint8_t flags(StateId s) const { return states_[s].flags; }
  bool has_tops(StateId s) const { return states_[s].count != 0; }
  const StackNode& node(uint32_t id) const { return nodes_[id]; }
  // The id of node (pos, parent), made if new (pos: an element after a rule reference, or a byte element).
  uint32_t node_id(uint32_t pos, uint32_t parent) { return intern_node(pos, parent); }
  // The bytes some stack of `s` can read next.
  ByteSet next_bytes(StateId s) const;

  // Memory in use (nodes, states, transitions), for callers that start afresh past a bound.
  size_t bytes() const;
  // Copies state `s` of `from` (the same grammar) into this machine; returns its id here.
  StateId import(const StackMachine& from, StateId s);

  const Grammar& grammar() const { return g_; }

 private:
  struct StateRec {
    uint32_t begin, count;
    uint8_t flags;
    uint64_t hash;
  };
  uint32_t intern_node(uint32_t pos, uint32_t parent);
  // Expands (pos, parent) into tops and flags of the closure under construction.
  void expand(uint32_t pos, uint32_t parent);
  StateId finish_closure();
  bool visit(uint32_t pos, uint32_t parent);

  const Grammar& g_;
  std::vector<StackNode> nodes_;
  FlatMap64 node_ids_;
  std::vector<StateRec> states_;
  std::vector<uint32_t> pool_;
  std::vector<uint32_t> slots_;   // open addressing over states_ by hash: state id + 1, 0 empty
  std::vector<uint32_t> row_of_;  // per state: 1 + its row in rows_, 0 when it has none yet
  std::vector<uint32_t> rows_;    // 256 cached next states (+1, 0 unknown) per row
  StateId start_ = kDeadState;
  bool have_start_ = false;

  // Closure scratch.
  std::vector<uint64_t> work_;
  std::vector<uint64_t> visited_;
  FlatMap64 visited_big_;
  bool visited_spilled_ = false;
  std::vector<uint32_t> tops_;
  uint8_t flags_ = 0;
};

}  // namespace tessera::grammar

namespace tessera::grammar {

// Whether `g` matches all of `text` (a fresh machine per call: for tests and one-off checks).
bool accepts(const Grammar& g, std::string_view text);

}  // namespace tessera::grammar
