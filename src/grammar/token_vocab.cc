#include "grammar/token_vocab.h"

#include <algorithm>

namespace tessera::grammar {

std::shared_ptr<const TokenVocab> TokenVocab::from_bytes(std::vector<std::string> token_bytes,
                                                         std::vector<TokenId> eog) {
  return std::shared_ptr<const TokenVocab>(new TokenVocab(std::move(token_bytes), std::move(eog)));
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const model::Tokenizer& tokenizer,
                                                             std::vector<TokenId> eog) {
  const int n = tokenizer.vocab_size();
  // Some formats drop a token's leading space right after BOS; every other predecessor gives the plain bytes.
  TokenId neutral = tokenizer.eos_id();
  if (neutral < 0 || neutral == tokenizer.bos_id()) neutral = tokenizer.bos_id() == 0 ? 1 : 0;
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (TokenId t = 0; t < n; ++t) {
    if (!tokenizer.is_special(t)) bytes[static_cast<size_t>(t)] = tokenizer.decode_piece(neutral, t);
  }
  if (eog.empty()) {
    if (tokenizer.eos_id() >= 0) eog.push_back(tokenizer.eos_id());
  }
  return from_bytes(std::move(bytes), std::move(eog));
}

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<TokenId> eog)
    : bytes_(std::move(bytes)), eog_(std::move(eog)) {
  const size_t n = bytes_.size();
  eog_flag_.assign(n, 0);
  std::erase_if(eog_, [n](TokenId t) { return t < 0 || static_cast<size_t>(t) >= n; });
  for (TokenId t : eog_) eog_flag_[static_cast<size_t>(t)] = 1;
  text_bits_.assign(mask_words(), 0);
  for (size_t t = 0; t < n; ++t) {
    if (bytes_[t].empty() || eog_flag_[t] || bytes_[t].size() > UINT16_MAX) continue;
    sorted_.push_back(static_cast<TokenId>(t));
    text_bits_[t / 64] |= uint64_t{1} << (t % 64);
    max_bytes_ = std::max(max_bytes_, bytes_[t].size());
  }
  std::sort(sorted_.begin(), sorted_.end(), [this](TokenId a, TokenId b) {
    const std::string& x = bytes_[static_cast<size_t>(a)];
    const std::string& y = bytes_[static_cast<size_t>(b)];
    return x < y || (x == y && a < b);
  });
  // Preorder trie: a prefix sorts before its extensions, so the token equal to a node's path is the one that
  // opens the node, and duplicates follow it.
  trie_.push_back({0, 0, 0, 0, 0});
  std::vector<uint32_t> open{0};
  std::string_view prev;
  for (uint32_t rank = 0; rank < sorted_.size(); ++rank) {
    const std::string_view t = bytes_[static_cast<size_t>(sorted_[rank])];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < t.size() && prev[lcp] == t[lcp]) ++lcp;
    while (open.size() - 1 > lcp) {
      trie_[open.back()].end = static_cast<uint32_t>(trie_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < t.size(); ++d) {
      open.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back({0, rank, rank, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(t[d])});
    }
    trie_[open.back()].tok_end = rank + 1;
    prev = t;
  }
  while (!open.empty()) {
    trie_[open.back()].end = static_cast<uint32_t>(trie_.size());
    open.pop_back();
  }
}

}  // namespace tessera::grammar
