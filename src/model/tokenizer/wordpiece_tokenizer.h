// WordPieceTokenizer: BERT's tokenizer, as Hugging Face's tokenizers library runs a tokenizer.json with a
// BertNormalizer, a BertPreTokenizer and a WordPiece model, and as llama.cpp's `bert` GGUF vocabularies hold it.
//
//  1. Added tokens ([CLS], [SEP], [MASK], ...) are cut out of the raw text first (special ones only with
//     parse_special), as for every other tokenizer (added_tokens.h).
//  2. Normaliser (BertNormalizer): drops U+0000, U+FFFD and other-category characters (Cc, Cf, Cs, Co, Cn; tab,
//     newline and carriage return count as whitespace), turns whitespace into spaces, surrounds CJK ideographs
//     with spaces, and, when the model is uncased, strips accents (NFD, then nonspacing marks removed) and
//     lowercases character by character (full Unicode mapping, no context: a final sigma stays sigma).
//  3. Pre-tokeniser (BertPreTokenizer): splits at whitespace, and every punctuation character (ASCII
//     punctuation, or a Unicode P* category) is a word of its own.
//  4. WordPiece: each word is matched greedily, longest piece first; pieces after the first carry the
//     continuation prefix "##"; a word with no full match, or longer than max_input_chars_per_word (100)
//     characters, becomes [UNK].
// With add_special the result is [CLS] ... [SEP].
//
// GGUF stores the vocabulary in llama.cpp's "phantom space" form: a word-initial piece "hello" is "▁hello", a
// continuation "##lo" is "lo", special tokens as they are. from_vocab() and to_vocab() convert.
//
// Thread-safety: immutable after creation.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {

struct WordPieceSpec {
  std::vector<std::string> tokens;  // Hugging Face's spelling: "hello", "##lo", "[CLS]"
  std::vector<bool> special;        // added special tokens (control): matched in text only with parse_special
  TokenId unk = -1, cls = -1, sep = -1, pad = -1, mask = -1;
  bool add_cls_sep = true;  // what encode() with add_special adds around the text
  bool lowercase = true;
  bool strip_accents = true;  // Hugging Face's strip_accents: null follows lowercase
  bool clean_text = true, handle_chinese_chars = true;
  std::string prefix = "##";  // continuing_subword_prefix
  int max_input_chars_per_word = 100;
};

class WordPieceTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<WordPieceTokenizer>> create(WordPieceSpec spec);
  // A tokenizer.json whose model is WordPiece (+ tokenizer_config.json text, optional); Unimplemented naming
  // anything else (a model type, normaliser or pre-tokeniser this class does not implement).
  static Result<std::unique_ptr<WordPieceTokenizer>> from_json(std::string_view tokenizer_json,
                                                               std::string_view tokenizer_config_json,
                                                               const std::string& name);
  static Result<std::unique_ptr<WordPieceTokenizer>> load(const std::string& tokenizer_json_path);
  // A GGUF `bert` vocabulary (phantom-space form).
  static Result<std::unique_ptr<WordPieceTokenizer>> from_vocab(const Vocab& vocab);

  int vocab_size() const override { return static_cast<int>(spec_.tokens.size()); }
  TokenId bos_id() const override { return spec_.cls; }
  TokenId eos_id() const override { return spec_.sep; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    return tokenize(text, {add_bos, true});
  }
  std::vector<TokenId> tokenize(std::string_view text, const EncodeOptions& options) const override;
  bool is_special(TokenId token) const override;
  std::string special_text(TokenId token) const override;
  // A word-initial piece after another piece gets a space; a continuation is glued ("##" dropped).
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string_view kind() const override { return "wordpiece"; }
  Result<Vocab> to_vocab() const override;
  // This tokenizer as a Hugging Face tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece model and
  // decoder, a [CLS] $A [SEP] TemplateProcessing when it adds them), which from_json() reads back.
  std::string tokenizer_json() const;

  const WordPieceSpec& spec() const { return spec_; }
  // The normalised, pre-tokenised words of a plain text (steps 2 and 3), for tests.
  std::vector<std::string> words(std::string_view text) const;

 private:
  explicit WordPieceTokenizer(WordPieceSpec spec);
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  WordPieceSpec spec_;
  std::unordered_map<std::string, TokenId> initial_;       // word-initial pieces
  std::unordered_map<std::string, TokenId> continuation_;  // continuation pieces, prefix removed
  AddedTokenMatcher added_;
  size_t max_piece_bytes_ = 0;
};

}  // namespace tessera::model
