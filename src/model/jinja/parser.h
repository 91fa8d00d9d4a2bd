// The Jinja parser: tokens -> syntax tree, with the grammar and operator precedence of @huggingface/jinja
// (so that templates which parse there parse here, and the same ones fail). Statements: if/elif/else,
// for (tuple targets, `if` filter, else), set (tuple targets, namespace attributes, block set), macro,
// call blocks, filter blocks, break/continue. Nesting is limited (kMaxDepth) so that a hostile template
// cannot exhaust the stack.
#pragma once

#include <vector>

#include "base/status.h"
#include "model/jinja/ast.h"
#include "model/jinja/lexer.h"

namespace tessera::model::jinja {

inline constexpr int kMaxParseDepth = 200;

// InvalidArgument "line N: ..." naming what was expected.
Result<NodePtr> parse(const std::vector<Token>& tokens);

}  // namespace tessera::model::jinja
