// Tokenizer: text <-> token ids. One implementation per file format (llama2.c now; tokenizer.json and
// SentencePiece later), all behind this interface so the engine and servers never name a format.
//
// Thread-safety: immutable after loading; every method is const and safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::model {

struct Vocab;

using TokenId = int32_t;  // token ids are data (they fill int32 tensors), hence a plain integer

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;
  virtual TokenId eos_id() const = 0;

  // Token ids for `text`; with add_bos the first id is bos_id().
  virtual std::vector<TokenId> encode(std::string_view text, bool add_bos) const = 0;

  // The bytes `token` contributes to the output text when it follows `prev` (some formats drop a
  // leading space after BOS). Byte tokens yield their raw byte, so a multi-byte UTF-8 character spread
  // over several tokens comes out whole once all of them are concatenated.
  virtual std::string decode_piece(TokenId prev, TokenId token) const = 0;

  // A short name of the algorithm ("llama2c", "sentencepiece-bpe", "bpe", "byte-level-bpe", ...).
  virtual std::string_view kind() const = 0;
  // The vocabulary as plain data, for writing it into another format; Unimplemented where the format
  // cannot be expressed as a Vocab.
  virtual Result<Vocab> to_vocab() const;

  // The text of a token sequence (concatenated decode_piece()s); a leading BOS contributes nothing.
  std::string decode(std::span<const TokenId> tokens) const;
};

}  // namespace tessera::model
