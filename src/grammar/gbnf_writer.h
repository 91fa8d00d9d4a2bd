// Syntax trees back to GBNF text, and trees composed from several front ends: a caller can put a JSON schema's
// rules (json_schema.h) inside literal text of its own and hand the result on as an ordinary GBNF spec, compiled,
// cached and sent to a prefill node like any other (serve/forced_tools.h writes forced tool calls in a model
// family's own syntax so).
//
// write_gbnf(ast) is read back by parse_gbnf() as the same language: rule names are made GBNF-safe (letters,
// digits, '-'; unique), the tree's root becomes `root`, literals and classes are escaped code point by code point.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "grammar/ast.h"

namespace tessera::grammar {

std::string write_gbnf(const Ast& ast);

// Adds `from`'s rules to `into`, each renamed `prefix` + "-" + its name (references follow); returns the new name
// of `from`'s root.
std::string merge_ast(Ast& into, const Ast& from, std::string_view prefix);

// Any text (one or more code points, or none when `allow_empty`) in which none of `words` occurs. Every word must
// start with the same character and contain it nowhere else, and no word may be a prefix of another (true of
// closing tags such as "</parameter>"): then a word can only begin where that character stands, and the text is
// a run of segments that each start with it and do not go on to spell a word.
Expr text_without(const std::vector<std::string>& words, bool allow_empty = true);

}  // namespace tessera::grammar
