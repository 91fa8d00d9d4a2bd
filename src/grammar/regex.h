// Regular expressions (the common subset of ECMAScript and Python `re`) as a grammar expression: the whole text
// must match (an anchored match; a leading ^ and trailing $ are accepted and change nothing).
//
// Supported: literals, `.` (any character but line terminators), classes [a-z] [^...] with escapes, \d \w \s and
// their negations (ASCII: a subset of both dialects' meaning, so whatever matches here matches there), \t \n \r
// \f \v \0 \xHH \uHHHH \u{H..}, escaped punctuation, groups ( ) (?: ) (?<name> ) (?P<name> ), alternation,
// quantifiers * + ? {n} {n,} {n,m} and their lazy forms. Refused with the offending column: backreferences,
// lookaround, word boundaries, anchors inside the expression, inline flags, possessive quantifiers.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/ast.h"

namespace tessera::grammar {

Result<Expr> parse_regex(std::string_view pattern);

// A grammar whose root is the regex.
Result<Ast> regex_grammar(std::string_view pattern);

}  // namespace tessera::grammar
