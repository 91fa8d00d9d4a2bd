// SpmTokenizer: SentencePiece-style BPE over a scored vocabulary, as llama.cpp runs a GGUF `llama`
// tokenizer (and as SentencePiece runs a BPE .model).
//
// encode(): the text is first cut around added tokens (control / user-defined / unknown, see
// added_tokens.h); in each plain piece spaces become U+2581 ("▁"), a "▁" is prepended when add_space_prefix
// and the piece starts the text or follows an added token (llama.cpp's rule), the piece is split into
// UTF-8 characters, then the adjacent pair whose concatenation is the highest-scoring vocabulary entry
// merges, repeatedly, the leftmost pair winning ties; a character that is no entry becomes its byte tokens
// "<0xNN>" (or <unk>). decode_piece(): "▁" becomes a space, byte tokens their byte, control tokens nothing;
// the first piece (after BOS or at the start) loses the prefix space.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {

class SpmTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<SpmTokenizer>> create(Vocab vocab);

  int vocab_size() const override { return static_cast<int>(vocab_.tokens.size()); }
  TokenId bos_id() const override { return vocab_.bos; }
  TokenId eos_id() const override { return vocab_.eos; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    return tokenize(text, {add_bos, true});
  }
  std::vector<TokenId> tokenize(std::string_view text, const EncodeOptions& options) const override;
  bool is_special(TokenId token) const override;
  std::string special_text(TokenId token) const override;
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string_view kind() const override { return "sentencepiece-bpe"; }
  Result<Vocab> to_vocab() const override { return vocab_; }

 private:
  explicit SpmTokenizer(Vocab vocab);
  TokenId lookup(std::string_view piece) const;
  void encode_piece(const std::string& escaped, std::vector<TokenId>& out) const;

  Vocab vocab_;
  std::unordered_map<std::string, TokenId> index_;
  TokenId byte_ids_[256];
  AddedTokenMatcher added_;
};

}  // namespace tessera::model
