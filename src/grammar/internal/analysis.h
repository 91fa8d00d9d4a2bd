// build_grammar()'s second half (analysis.cc): checks and analyses of a lowered grammar. Fills Grammar's derived
// fields (nullable, reachable, follow, frames, shortest); InvalidArgument for a rule that can never finish or for
// left recursion, naming the rule and `rule_where[rule]` (its origin, " (line 3 column 1)" or "").
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

Status analyse_grammar(Grammar& g, const std::vector<std::string>& rule_where);

}  // namespace tessera::grammar
