// BpeTokenizer: Hugging Face `tokenizers` BPE, as described by a tokenizer.json, in its two common styles:
//  - SentencePiece-like (Llama-2): normalizers put U+2581 for spaces and prepend one; the text is split into
//    characters; characters missing from the vocabulary fall back to byte tokens "<0xNN>".
//  - byte-level (GPT-2, Qwen, Llama-3): a Unicode-aware pre-tokenizer regex splits the text into words; each
//    word's bytes map to GPT-2's printable byte alphabet and merge within the word.
// Then, in both, the adjacent pair with the lowest merge rank merges (leftmost first), repeatedly.
// Added tokens (special or not) are matched in the raw text first, leftmost-longest, and never split.
//
// Supported components (anything else is an Unimplemented error naming it): normalizers NFC, NFKC, NFD,
// NFKD, Lowercase, Prepend, Replace (string pattern), Sequence; pre-tokenizers ByteLevel, Split (regex,
// Isolated), Metaspace, Sequence; model BPE with byte_fallback, fuse_unk, ignore_merges.
//
// Thread-safety: immutable after construction.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {

struct BpeSpec {
  struct Normalizer {
    enum Kind { kNfc, kNfkc, kNfd, kNfkd, kLowercase, kPrepend, kReplace } kind;
    std::string a, b;  // Prepend: a; Replace: a -> b
  };
  struct PreTokenizer {
    enum Kind { kSplitRegex, kByteLevel, kMetaspace } kind;
    std::string pattern;            // kSplitRegex
    bool add_prefix_space = false;  // kByteLevel, kMetaspace (prepend_scheme != never)
    bool use_regex = true;          // kByteLevel; kMetaspace: split on the replacement
  };
  using AddedToken = model::AddedToken;

  bool byte_level = false;                                  // a ByteLevel pre-tokenizer or decoder is present
  std::vector<std::string> tokens;                          // id -> token (model vocabulary and added tokens)
  std::vector<std::pair<std::string, std::string>> merges;  // best first
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<AddedToken> added;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  TokenId unk = -1, bos = -1, eos = -1, pad = -1;
  bool add_bos = false, add_eos = false;  // what encode() with add_special adds
  bool strip_first_space = false;         // the decoder drops the space the normalizer prepended
  bool whole_newline_runs = false;        // a word of newlines that is one token is that token (Gemma 4)
  std::string pre_name = "default";
};

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(BpeSpec spec);
  // tokenizer.json text plus, optionally, tokenizer_config.json text (bos/eos and add_bos_token).
  static Result<std::unique_ptr<BpeTokenizer>> from_json(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json,
                                                         const std::string& name);
  // A tokenizer.json file; reads tokenizer_config.json from the same directory when it exists.
  static Result<std::unique_ptr<BpeTokenizer>> load(const std::string& tokenizer_json_path);
  // OpenAI's GPT-2 files: encoder.json (token -> id) and vocab.bpe (merges).
  static Result<std::unique_ptr<BpeTokenizer>> load_gpt2(const std::string& encoder_json_path,
                                                         const std::string& vocab_bpe_path);
  // A GGUF `gpt2` vocabulary (`pre` selects the pre-tokenizer, gguf_pre_tokenizers.h) or a `gemma4` one:
  // spaces become U+2581, each line and each run of newlines is a word, merges run over the raw UTF-8 of a
  // word, and pieces outside the vocabulary fall back to "<0xNN>" byte tokens (llama.cpp's reading).
  static Result<std::unique_ptr<BpeTokenizer>> from_vocab(const Vocab& vocab);

  ~BpeTokenizer() override;

  int vocab_size() const override { return static_cast<int>(spec_.tokens.size()); }
  TokenId bos_id() const override { return spec_.bos; }
  TokenId eos_id() const override { return spec_.eos; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override {
    return tokenize(text, {add_bos, true});
  }
  std::vector<TokenId> tokenize(std::string_view text, const EncodeOptions& options) const override;
  bool is_special(TokenId token) const override;
  std::string special_text(TokenId token) const override;
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string_view kind() const override { return spec_.byte_level ? "byte-level-bpe" : "bpe"; }
  Result<Vocab> to_vocab() const override;

  const BpeSpec& spec() const { return spec_; }
  // -1 when absent.
  TokenId lookup(std::string_view token) const;

 private:
  struct Compiled;
  explicit BpeTokenizer(BpeSpec spec);
  Status compile();
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  void encode_segment(std::string_view text, std::vector<TokenId>& out) const;
  static Status set_gguf_pre_tokenizer(const Vocab& v, BpeSpec& s);

  BpeSpec spec_;
  std::unordered_map<std::string, TokenId> index_;
  std::unordered_map<uint64_t, std::pair<int32_t, TokenId>> merge_;  // (left id, right id) -> (rank, merged id)
  TokenId byte_token_[256];             // byte-level: the id of each byte's symbol; SentencePiece-like: "<0xNN>"
  std::unique_ptr<Compiled> compiled_;  // regexes
};

// GPT-2's reversible map from bytes to printable characters (UTF-8 encoded), and its inverse.
const std::string& byte_to_unicode(uint8_t b);
// -1 when `cp` is not one of the 256 characters.
int unicode_to_byte(uint32_t cp);

}  // namespace tessera::model
