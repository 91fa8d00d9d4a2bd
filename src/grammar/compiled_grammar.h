// CompiledGrammar: a Grammar bound to a model's vocabulary, with its token masks precomputed.
//
// For every byte element of the grammar (a position a stack top can be at), compile() walks the vocabulary trie
// once from a stack whose rest is unknown (kBottomParent) and sorts each token into one of three classes:
//   accepted:  its bytes are read entirely within the rule at that position (so whatever lies below, it fits);
//   rejected:  no way to read it, even by leaving the rule, given the bytes that can follow the rule (FOLLOW);
//   uncertain: it can only be read by leaving the rule, so the stack below decides.
// The step's mask is then the union, over the current stacks, of the precomputed accepted sets, plus the
// uncertain tokens checked against the real stack: usually a few dozen, not the vocabulary. This is the
// context-independent/context-dependent split of xgrammar's adaptive token mask cache, over a recognizer of our own.
// Accepted sets are kept as a token list, a list of exceptions, or a bitset, whichever is smallest.
//
// Thread-safety: immutable after compile(); shared by every sequence that uses the grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/spec.h"
#include "grammar/token_vocab.h"

namespace tessera::grammar {

struct PositionMask {
  enum class Kind : uint8_t { kNone, kList, kExcept, kBits };
  Kind kind = Kind::kNone;
  uint32_t offset = 0;  // kList/kExcept: token ids in ids_; kBits: words in bits_
  uint32_t count = 0;
  uint32_t uncertain_offset = 0;  // ranks (indices into TokenVocab::sorted(), ascending) in uncertain_
  uint32_t uncertain_count = 0;
};

struct CompileStats {
  size_t positions = 0;
  size_t accepted = 0;       // summed over positions
  size_t uncertain = 0;      // summed over positions
  size_t machine_bytes = 0;  // the recognizer's tables after the precomputation
  double seconds = 0;
  size_t bytes = 0;  // the tables kept
};

class CompiledGrammar {
 public:
  // `spec`: what the grammar was made from, kept for the caller (a decode node sends it to its prefill node).
  static std::shared_ptr<const CompiledGrammar> compile(std::shared_ptr<const Grammar> grammar,
                                                        std::shared_ptr<const TokenVocab> vocab, Spec spec = {});

  const Grammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // The classification at stack position `pos` (an element index, with a class element's DFA state on top).
  const PositionMask& mask_at(uint32_t pos) const { return masks_[index_[elem_of(pos)] + sub_of(pos)]; }
  const uint32_t* ids() const { return ids_.data(); }
  const uint64_t* bits() const { return bits_.data(); }
  const uint32_t* uncertain() const { return uncertain_.data(); }
  const CompileStats& stats() const { return stats_; }

  const Spec& spec() const { return spec_; }

 private:
  CompiledGrammar() = default;
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<PositionMask> masks_;  // per position: byte elements, and each DFA state of class elements
  std::vector<uint32_t> index_;      // per element: where its positions start in masks_
  std::vector<uint32_t> ids_;
  std::vector<uint64_t> bits_;
  std::vector<uint32_t> uncertain_;
  CompileStats stats_;
  Spec spec_;
};

}  // namespace tessera::grammar
