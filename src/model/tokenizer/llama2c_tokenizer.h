// The llama2.c tokenizer format (tokenizer.bin / tok512.bin) and its encoder and decoder.
//
// File: int32 max_token_length, then for each token: float32 score, int32 length, `length` bytes. The
// count is not stored; it is whatever the file holds and must equal the model's vocabulary size.
// Ids 0 <unk>, 1 BOS, 2 EOS; byte-fallback tokens are the pieces "<0x00>".."<0xFF>".
//
// encode() reproduces llama2.c's run.c exactly: BOS, a dummy-prefix " " token when the text is not empty,
// one token per UTF-8 character (or its bytes as byte tokens when the character is not in the vocabulary),
// then repeated merging of the adjacent pair whose concatenation is the highest-scoring vocabulary entry
// (the leftmost pair wins ties). decode_piece() strips the space of a piece that follows BOS and turns
// byte tokens into their byte.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

class Llama2cTokenizer final : public Tokenizer {
 public:
  // InvalidArgument names the file and the offset when the file is malformed.
  static Result<std::unique_ptr<Llama2cTokenizer>> load(const std::string& path);
  static Result<std::unique_ptr<Llama2cTokenizer>> parse(std::span<const uint8_t> bytes, const std::string& name);
  // Builds one from pieces and scores (used by `tessera synth` and tests).
  static Result<std::unique_ptr<Llama2cTokenizer>> from_pieces(std::vector<std::string> pieces,
                                                               std::vector<float> scores);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  TokenId bos_id() const override { return 1; }
  TokenId eos_id() const override { return 2; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override;
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string_view kind() const override { return "llama2c"; }
  // The file spells BOS/EOS "\n<s>\n" / "\n</s>\n"; shown as SentencePiece names them.
  std::string special_text(TokenId token) const override {
    return token == 1 ? "<s>" : token == 2 ? "</s>" : std::string();
  }
  // As SentencePiece pieces: spaces back to U+2581, "<s>"/"</s>" for BOS/EOS, token types.
  Result<Vocab> to_vocab() const override;

  const std::string& piece(TokenId id) const { return pieces_.at(static_cast<size_t>(id)); }
  float score(TokenId id) const { return scores_.at(static_cast<size_t>(id)); }
  // -1 when absent.
  TokenId lookup(std::string_view piece) const;

  // The file image of this tokenizer in llama2.c's format.
  std::vector<uint8_t> serialize() const;

 private:
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores);

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, TokenId> index_;  // piece -> lowest id with that piece
  uint32_t max_token_length_ = 0;
  int byte_base_ = -1;  // id of "<0x00>" when the 256 byte tokens are contiguous, else -1
};

}  // namespace tessera::model
