#include "serve/resume_text.h"

namespace tessera::serve {

std::string pending_text(const model::Tokenizer& tokenizer, model::TokenId prev, const api::Resume& resume) {
  std::string text;
  for (model::TokenId t : resume.tokens) {
    text += tokenizer.decode_piece(prev, t);
    prev = t;
  }
  return resume.text_bytes >= text.size() ? std::string() : text.substr(resume.text_bytes);
}

}  // namespace tessera::serve
