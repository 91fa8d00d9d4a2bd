// The Jinja lexer: template source -> tokens, each with the 1-based line of the original source it came
// from (so that parse and render errors name a line).
//
// Before tokenizing, the source is preprocessed as transformers and @huggingface/jinja do for chat
// templates: one trailing newline is dropped, lstrip_blocks (spaces and tabs before `{%` / `{#` at the start
// of a line are removed) and trim_blocks (the newline after `%}` / `#}` is removed) are on, and the
// `{% generation %}` / `{% endgeneration %}` markers some templates carry for training masks are removed.
// `{%-`, `-%}`, `{{-`, `-}}`, `{#-` and `-#}` strip the whitespace on their side.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::model::jinja {

enum class Tok : uint8_t {
  kText,
  kNumber,
  kString,
  kIdentifier,
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kOpenSquare,
  kCloseSquare,
  kOpenCurly,
  kCloseCurly,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // a sign with no number after it
  kComment,
};

struct Token {
  Tok type;
  std::string value;
  int line = 0;
};

// InvalidArgument "line N: ..." for an unterminated string or comment, a bad escape, or a stray character.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace tessera::model::jinja
