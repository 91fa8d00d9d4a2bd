#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

std::string Tokenizer::decode(std::span<const TokenId> tokens) const {
  std::string out;
  TokenId prev = -1;
  for (TokenId t : tokens) {
    if (t != bos_id()) out += decode_piece(prev, t);
    prev = t;
  }
  return out;
}

}  // namespace tessera::model
