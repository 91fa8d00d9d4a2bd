// The node side of a resumed stream's text (see api/resume.h for the wire format).
#pragma once

#include <string>

#include "api/resume.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::serve {

// The part of the resumed tokens' text the client has not received: their decode_piece() chain (starting
// after `prev`, the last prompt token) without its first text_bytes bytes.
std::string pending_text(const model::Tokenizer& tokenizer, model::TokenId prev, const api::Resume& resume);

}  // namespace tessera::serve
