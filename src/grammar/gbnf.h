// GBNF, llama.cpp's grammar notation: `name ::= alternatives` rules over Unicode code points, with "literals",
// [character classes] ([^...] negated, \x \u \U \t \r \n escapes), `.` for any character, ( groups ),
// * + ? {m} {m,} {m,n} repetition, # comments, and `root` as the start. Token terminals (<...>, <[id]>, !<...>)
// are refused: this engine constrains bytes, not token ids.
//
// Errors are InvalidArgument with the line and column ("line 3 column 14: expecting ')'").
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/ast.h"

namespace tessera::grammar {

Result<Ast> parse_gbnf(std::string_view text);

// "line L column C" of byte offset `at` in `text` (1-based; columns count bytes).
std::string line_column(std::string_view text, size_t at);

}  // namespace tessera::grammar
