// A request's structured output (api/structured_output.h) compiled for the node's model (grammar/compiler.h), and
// the way back to the wire form for a decode node's call to its prefill node.
//
// Thread-safety: functions; the Compiler is thread-safe.
#pragma once

#include <memory>

#include "api/structured_output.h"
#include "base/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/compiler.h"

namespace tessera::serve {

// InvalidArgument naming where the schema, regex or grammar is wrong (the caller answers 400).
Result<std::shared_ptr<const grammar::CompiledGrammar>> compile_structured(grammar::Compiler& compiler,
                                                                           const api::StructuredOutput& s);
grammar::Spec spec_of(const api::StructuredOutput& s);
api::StructuredOutput structured_of(const grammar::Spec& spec);

}  // namespace tessera::serve
