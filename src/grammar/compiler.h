// Compiler: from what a request asks for (a Spec: a JSON schema, any JSON object, a regular expression, a list of
// choices, or a GBNF grammar) to a CompiledGrammar for one model's vocabulary, with a cache keyed by the spec.
//
// This is the grammar module's front door: the node compiles a request's spec here before it submits the request
// (so a bad schema is a 400 naming where it is wrong, and the engine thread never compiles), and the prefill node
// of a disaggregated pair compiles the same spec, found again in its own cache.
//
// Thread-safety: compile() and vocab() may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/ast.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/spec.h"
#include "grammar/token_vocab.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::grammar {

// The syntax tree of a spec (no vocabulary needed): InvalidArgument naming the position of what is wrong.
Result<Ast> spec_ast(const Spec& spec);
// spec_ast() lowered to bytes.
Result<std::shared_ptr<const Grammar>> build_spec(const Spec& spec);

// A grammar matching exactly one of `choices`.
Ast choice_grammar(const std::vector<std::string>& choices);

class Compiler {
 public:
  // `eog`: the tokens that end generation (allowed once the grammar is complete).
  Compiler(const model::Tokenizer& tokenizer, std::vector<TokenId> eog, size_t cache_entries = 64);

  Result<std::shared_ptr<const CompiledGrammar>> compile(const Spec& spec);
  // The vocabulary trie, built on first use (a vocabulary of 150k tokens takes a moment).
  std::shared_ptr<const TokenVocab> vocab();

 private:
  const model::Tokenizer& tokenizer_;
  const std::vector<TokenId> eog_;
  const size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const TokenVocab> vocab_;                                        // GUARDED_BY(mu_)
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // GUARDED_BY(mu_), newest first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;                // GUARDED_BY(mu_)
};

}  // namespace tessera::grammar
