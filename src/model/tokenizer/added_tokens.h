// AddedTokens: the tokens matched in raw text before any tokenizer algorithm runs (Hugging Face's "added
// tokens", llama.cpp's control / user-defined tokens), and the split of a text around them.
//
// A text is cut at every occurrence of an added token, leftmost first and the longest at a position (the
// order Hugging Face's matcher uses); the pieces between occurrences are tokenized normally and each
// occurrence becomes its id. Special (control) tokens are matched only when the caller asks
// (`parse_special`, llama.cpp's flag of that name and the opposite of vLLM's split_special_tokens);
// user-defined ones always, as both references do. lstrip/rstrip swallow the ASCII whitespace next to an
// occurrence; single_word requires a non-word character (or the text's edge) on both sides.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

struct AddedToken {
  TokenId id;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
  // Special (matched only with parse_special) yet spelled in decoded text: llama.cpp's user-defined tokens that
  // its loader also makes control tokens (Gemma 4's <|tool_response>).
  bool visible = false;
};

class AddedTokenMatcher {
 public:
  struct Piece {
    std::string_view text;  // plain text (possibly empty) when id < 0
    TokenId id = -1;        // an added token
  };

  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // Pieces of `text` in order; plain pieces are never empty.
  std::vector<Piece> split(std::string_view text, bool parse_special) const;
  // The added token with this id, or nullptr.
  const AddedToken* find(TokenId id) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<uint32_t> first_[256];  // indices into tokens_ by first byte, longest content first
};

}  // namespace tessera::model
