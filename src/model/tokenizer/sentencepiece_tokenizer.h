// SentencePieceTokenizer: a SentencePiece `.model` file run by Google's libsentencepiece.
//
// The library's header is kept out of this one (it clashes with Abseil elsewhere in the build): only
// sentencepiece_tokenizer.cc includes it. encode() is the library's own Encode (normalisation, dummy
// prefix, byte fallback as the model specifies); decode_piece() turns "▁" into a space, byte pieces into
// their byte, control tokens into nothing, and drops the first piece's prefix space.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  int vocab_size() const override;
  TokenId bos_id() const override;
  TokenId eos_id() const override;
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override;
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string_view kind() const override { return "sentencepiece"; }
  Result<Vocab> to_vocab() const override;

 private:
  struct Impl;
  explicit SentencePieceTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::model
