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

  // Token ids for `text`; with add_bos, the special tokens the model's tokenizer adds around a text (BOS for
  // Llama and llama2.c, nothing for Qwen or GPT-2). Text spelling a special token becomes that token.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_bos) const = 0;

  struct EncodeOptions {
    bool add_special = true;    // as encode()'s add_bos
    bool parse_special = true;  // false: text spelling a control token is tokenized as plain text
                                // (user-defined tokens still match, as in llama.cpp and Hugging Face)
  };
  // encode() with both choices (llama.cpp's llama_tokenize flags); formats without special-token matching
  // ignore parse_special.
  virtual std::vector<TokenId> tokenize(std::string_view text, const EncodeOptions& options) const {
    return encode(text, options.add_special);
  }
  // Control tokens (BOS, EOS, chat markers): what skip_special_tokens leaves out of decoded text.
  virtual bool is_special(TokenId token) const { return token == bos_id() || token == eos_id(); }
  // How a special token is spelled ("<s>", "<|im_end|>"), for showing it when special tokens are not
  // skipped; empty where the format does not keep the spelling.
  virtual std::string special_text(TokenId /*token*/) const { return {}; }

  // The bytes `token` contributes to the output text when it follows `prev` (some formats drop a
  // leading space after BOS); nothing for special tokens (is_special), which generated text leaves out. Byte tokens
  // yield their raw byte, so a multi-byte UTF-8 character spread over several tokens comes out whole once all of them
  // are concatenated.
  virtual std::string decode_piece(TokenId prev, TokenId token) const = 0;

  // A short name of the algorithm ("llama2c", "sentencepiece-bpe", "bpe", "byte-level-bpe", ...).
  virtual std::string_view kind() const = 0;
  // The vocabulary as plain data, for writing it into another format; Unimplemented where the format
  // cannot be expressed as a Vocab.
  virtual Result<Vocab> to_vocab() const;

  // The text of a token sequence (concatenated decode_piece()s); a leading BOS contributes nothing.
  std::string decode(std::span<const TokenId> tokens) const;
  // The same, with skip_special the text of special tokens left out (vLLM's skip_special_tokens).
  std::string decode(std::span<const TokenId> tokens, bool skip_special) const;
};

}  // namespace tessera::model
