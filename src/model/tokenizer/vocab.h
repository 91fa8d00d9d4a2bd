// Vocab: a tokenizer's vocabulary as plain data, in the shape GGUF stores it (`tokenizer.ggml.*`).
//
// It is what moves a tokenizer between formats: `tessera convert` turns a llama2.c tokenizer or a
// tokenizer.json into a Vocab and writes it into a GGUF file; the GGUF reader turns it back into a working
// Tokenizer with make_tokenizer(). Two kinds, named as llama.cpp names them:
//   kSentencePiece ("llama"): pieces with U+2581 for spaces, scores (higher merges first), byte tokens
//       "<0xNN>"; no merges list.
//   kByteLevelBpe ("gpt2"): GPT-2's byte-to-unicode mapped pieces, ranked merges "a b", and a pre-tokenizer
//       named by `pre` ("gpt2", "qwen2", "llama3").
//   kWordPiece ("bert"): BERT's WordPiece in llama.cpp's phantom-space form: "▁word" starts a word, "iece" is
//       a continuation ("##iece"), special tokens ([CLS], [SEP], ...) as they are; BOS is [CLS], EOS [SEP].
//   kGemma4Bpe ("gemma4"): SentencePiece-style pieces (U+2581 for spaces, byte tokens "<0xNN>") merged by
//       ranked merges over whole lines of raw UTF-8, as llama.cpp tokenizes Gemma 4.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

enum class VocabKind : uint8_t { kSentencePiece, kByteLevelBpe, kWordPiece, kGemma4Bpe };

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

enum : uint8_t { kStripLeft = 1, kStripRight = 2 };

struct Vocab {
  VocabKind kind = VocabKind::kSentencePiece;
  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty: all zero
  std::vector<int32_t> types;       // empty: all normal
  std::vector<std::string> merges;  // byte-level and gemma4 only, best first
  TokenId bos = -1, eos = -1, unk = -1, pad = -1;
  TokenId mask = -1;             // WordPiece's [MASK] (tokenizer.ggml.mask_token_id)
  bool add_bos = true;           // encode() with add_special starts with BOS
  bool add_eos = false;          // ... and ends with EOS
  bool add_space_prefix = true;  // SentencePiece: prepend a space to the text (and after each added token)
  std::string pre = "default";   // byte-level pre-tokenizer name (tokenizer.ggml.pre, see gguf_pre_tokenizers.h)
  // Per token, kStripLeft/kStripRight: whitespace next to the token in text is swallowed when it is matched
  // (llama.cpp's LSTRIP/RSTRIP attributes; GGUF does not store them, the reader derives them). Empty: none.
  std::vector<uint8_t> strip;
  // WordPiece's normaliser: lowercase and strip accents (tokenizer.ggml.normalizer.*; llama.cpp's default: both).
  bool lowercase = true, strip_accents = true;
  // Control tokens that decoded text still spells (AddedToken::visible); the reader derives them, as strip.
  std::vector<TokenId> visible_control;

  std::string_view kind_name() const {
    switch (kind) {
      case VocabKind::kSentencePiece:
        return "llama";
      case VocabKind::kByteLevelBpe:
        return "gpt2";
      case VocabKind::kWordPiece:
        return "bert";
      case VocabKind::kGemma4Bpe:
        return "gemma4";
    }
    return "?";
  }
  // InvalidArgument when lengths disagree or special ids are out of range.
  Status validate() const;
  // The tokens matched in raw text before tokenizing: control and unknown tokens (special: only with
  // parse_special) and user-defined ones, as llama.cpp partitions them.
  std::vector<AddedToken> added_tokens() const;
};

// A working tokenizer for a vocabulary (SpmTokenizer, BpeTokenizer or WordPieceTokenizer).
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const Vocab& vocab);

}  // namespace tessera::model
