#include "serve/structured.h"

#include <fmt/core.h>

namespace tessera::serve {

using Kind = api::StructuredOutput::Kind;

grammar::Spec spec_of(const api::StructuredOutput& s) {
  grammar::Spec spec;
  switch (s.kind) {
    case Kind::kNone:
    case Kind::kJsonObject:
      spec.kind = grammar::SpecKind::kJsonObject;
      break;
    case Kind::kJsonSchema:
      spec.kind = grammar::SpecKind::kJsonSchema;
      break;
    case Kind::kRegex:
      spec.kind = grammar::SpecKind::kRegex;
      break;
    case Kind::kChoice:
      spec.kind = grammar::SpecKind::kChoice;
      break;
    case Kind::kGrammar:
      spec.kind = grammar::SpecKind::kGbnf;
      break;
  }
  spec.text = s.spec;
  spec.whitespace = s.whitespace;
  return spec;
}

api::StructuredOutput structured_of(const grammar::Spec& spec) {
  api::StructuredOutput s;
  switch (spec.kind) {
    case grammar::SpecKind::kJsonObject:
      s.kind = Kind::kJsonObject;
      break;
    case grammar::SpecKind::kJsonSchema:
      s.kind = Kind::kJsonSchema;
      break;
    case grammar::SpecKind::kRegex:
      s.kind = Kind::kRegex;
      break;
    case grammar::SpecKind::kChoice:
      s.kind = Kind::kChoice;
      break;
    case grammar::SpecKind::kGbnf:
      s.kind = Kind::kGrammar;
      break;
  }
  s.spec = spec.text;
  s.whitespace = spec.whitespace;
  return s;
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> compile_structured(grammar::Compiler& compiler,
                                                                           const api::StructuredOutput& s) {
  auto compiled = compiler.compile(spec_of(s));
  if (!compiled.ok()) {
    return invalid_argument(fmt::format("'{}': {}", s.field.empty() ? api::structured_kind_name(s.kind) : s.field,
                                        compiled.status().message()));
  }
  return compiled;
}

}  // namespace tessera::serve
