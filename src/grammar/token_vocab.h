// TokenVocab: a model's vocabulary as the grammar engine sees it: the bytes each token adds to the text, and a
// byte trie over them, laid out in preorder so that a walk is a forward scan that can skip a whole subtree
// (every token starting with a dead prefix) in one jump.
//
// Token bytes are what the tokenizer's decode_piece() gives (byte-fallback "<0xNN>" tokens are their byte,
// byte-level BPE tokens are un-mapped from GPT-2's byte-to-unicode alphabet, SentencePiece's U+2581 is a space).
// Tokens with no bytes (control and other special tokens) and the end-of-generation tokens are not in the trie:
// a grammar never allows them as text; the end-of-generation tokens are allowed when the grammar is complete.
//
// Thread-safety: immutable after construction; built once per model and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::grammar {

using model::TokenId;

struct TrieNode {
  uint32_t end;        // preorder index one past this node's subtree
  uint32_t tok_begin;  // tokens whose bytes end exactly here: sorted()[tok_begin, tok_end)
  uint32_t tok_end;
  uint16_t depth;  // bytes from the root (the root is 0)
  uint8_t byte;    // the byte on the edge into this node
};

class TokenVocab {
 public:
  // `token_bytes[i]`: the bytes of token i; `eog`: the tokens that end generation.
  static std::shared_ptr<const TokenVocab> from_bytes(std::vector<std::string> token_bytes, std::vector<TokenId> eog);
  // The bytes of every token of `tokenizer`, decoded as they would follow an ordinary token (not BOS).
  static std::shared_ptr<const TokenVocab> from_tokenizer(const model::Tokenizer& tokenizer, std::vector<TokenId> eog);

  int size() const { return static_cast<int>(bytes_.size()); }
  std::string_view bytes(TokenId t) const { return bytes_[static_cast<size_t>(t)]; }
  const std::vector<TokenId>& eog() const { return eog_; }
  bool is_eog(TokenId t) const { return t >= 0 && t < size() && eog_flag_[static_cast<size_t>(t)] != 0; }
  // Token ids of the trie, by their bytes; trie nodes point into it.
  const std::vector<TokenId>& sorted() const { return sorted_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  // The preorder range of sorted() under trie node i: [trie[i].tok_begin, subtree_rank_end(i)).
  uint32_t subtree_rank_end(uint32_t i) const {
    return trie_[i].end < trie_.size() ? trie_[trie_[i].end].tok_begin : static_cast<uint32_t>(sorted_.size());
  }
  size_t max_token_bytes() const { return max_bytes_; }
  // Words of a token bitset (bit t of word t/64): what Matcher::fill_mask writes.
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  // Bit set for every token in the trie (tokens that can appear as text).
  const std::vector<uint64_t>& text_tokens() const { return text_bits_; }

 private:
  TokenVocab(std::vector<std::string> bytes, std::vector<TokenId> eog);

  std::vector<std::string> bytes_;
  std::vector<TokenId> eog_;
  std::vector<uint8_t> eog_flag_;
  std::vector<TokenId> sorted_;
  std::vector<TrieNode> trie_;
  std::vector<uint64_t> text_bits_;
  size_t max_bytes_ = 0;
};

}  // namespace tessera::grammar
