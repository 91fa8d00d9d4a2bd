// Matcher: one sequence's place in a compiled grammar, advanced token by token.
//
// fill_mask() writes the tokens allowed next as a bitset over the vocabulary: for each stack top, the accepted set
// precomputed for its position (compiled_grammar.h), plus those of its uncertain tokens that the real stack can
// read (walked in trie order so that tokens sharing a prefix share the steps), plus the end-of-generation tokens
// when the grammar is complete. accept_token() moves on by the token's bytes; a token the grammar does not allow
// leaves the state as it was and returns false.
//
// forced_bytes() says what comes next when the grammar allows exactly one continuation (the rest of a property
// name, a closing bracket), so an engine can emit it without a model step; must_end() says the grammar is
// complete and nothing more can follow, so the sequence can end without sampling the end token.
//
// Thread-safety: none; one per sequence, used by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/stack.h"

namespace tessera::grammar {

class Matcher {
 public:
  // `compact_bytes`: past this much memory in its recognizer tables the matcher starts them afresh from its current
  // state (tests make it tiny to exercise that).
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar, size_t compact_bytes = kDefaultCompactBytes);
  // A sequence's recognizer grows by a few KB a step (states met while checking uncertain tokens): a long
  // generation then holds a few MB, not hundreds.
  static constexpr size_t kDefaultCompactBytes = 4u << 20;

  // Bit t of mask[t / 64] set when token t is allowed next; mask has vocab().mask_words() words.
  void fill_mask(std::span<uint64_t> mask);
  // Moves on by token `t`'s bytes (or, for an end-of-generation token, ends); false when not allowed.
  bool accept_token(TokenId t);
  // Moves on by raw bytes; false (and no change) when the grammar cannot read all of them.
  bool accept_bytes(std::string_view bytes);
  // The grammar is complete here: the text may end.
  bool can_end() const { return (machine_->flags(state_) & kAccept) != 0; }
  // Complete, and no byte can follow: the text must end.
  bool must_end() const { return can_end() && !machine_->has_tops(state_); }
  // An end-of-generation token was accepted.
  bool ended() const { return ended_; }
  // The bytes the grammar forces from here (at most `limit`): the one byte allowed while only one is, stopping
  // where the text could also end.
  std::string forced_bytes(size_t limit = 256);

  // Jump-forward: tokens spelling the start of forced_bytes() (the longest vocabulary token at each point), up to
  // but not including the token that would reach the end of the forced stretch: that one the model chooses, so
  // that it may merge with what follows. Each is allowed in turn; accepting them is the caller's.
  std::vector<TokenId> forced_tokens(size_t limit = 64);
  // A shortest text that completes the grammar from here (along the current stacks); nullopt after the end.
  std::optional<std::string> shortest_completion();

  const CompiledGrammar& compiled() const { return *grammar_; }
  // Memory held by this matcher's recognizer tables.
  size_t memory_bytes() const { return machine_->bytes(); }
  const TokenVocab& vocab() const { return grammar_->vocab(); }

 private:
  // Moves to a fresh machine holding only the current state once the tables grow past a bound.
  void maybe_compact();
  void check_uncertain(uint32_t top, const PositionMask& pm, std::span<uint64_t> mask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  size_t compact_bytes_;
  std::unique_ptr<StackMachine> machine_;
  StateId state_ = kDeadState;
  bool ended_ = false;
  std::vector<uint64_t> scratch_;
  std::vector<uint32_t> tops_;
  std::vector<StateId> walk_;
};

}  // namespace tessera::grammar
