#include "model/tokenizer/tokenizer.h"

#include "model/tokenizer/vocab.h"

namespace tessera::model {

Result<Vocab> Tokenizer::to_vocab() const {
  return unimplemented("this tokenizer cannot be exported as a GGUF vocabulary");
}

std::string Tokenizer::decode(std::span<const TokenId> tokens) const {
  std::string out;
  TokenId prev = -1;
  for (TokenId t : tokens) {
    if (t != bos_id()) out += decode_piece(prev, t);
    prev = t;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> tokens, bool skip_special) const {
  std::string out;
  TokenId prev = -1;
  for (TokenId t : tokens) {
    if (!is_special(t)) {
      out += decode_piece(prev, t);
    } else if (!skip_special) {
      std::string s = special_text(t);
      out += s.empty() ? decode_piece(prev, t) : s;
    }
    prev = t;
  }
  return out;
}

}  // namespace tessera::model
