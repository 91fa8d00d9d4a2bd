// Structured output requests as they arrive on the wire, in every dialect Tessera accepts:
//   OpenAI:       response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema",
//                 "strict"}} (and llama-server's {"type": "json_object", "schema": ...});
//   vLLM:         structured_outputs {"json" | "regex" | "choice" | "grammar" | "json_object", "whitespace_pattern",
//                 "disable_any_whitespace", ...}, and the older guided_json | guided_regex | guided_choice |
//                 guided_grammar with guided_whitespace_pattern and guided_decoding_backend;
//   llama-server: "json_schema" (a schema) and "grammar" (GBNF) body fields.
// Parsing only checks shapes (the router validates bodies with it and never compiles grammars); the node compiles
// the spec (grammar/compiler.h), and a schema or grammar that does not compile is a 400 naming where it is wrong.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace tessera::api {

struct StructuredOutput {
  enum class Kind : uint8_t { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string spec;        // the schema (JSON text, in the client's key order), regex, choices (JSON array), GBNF
  std::string whitespace;  // JSON kinds: a regex for whitespace between tokens ("" for the default)
  std::string field;       // the request field that asked for it, for errors ("response_format", "guided_json", ...)

  bool none() const { return kind == Kind::kNone; }
};

// "json_object", "json_schema", "regex", "choice", "grammar" ("" for kNone): the names grammar::SpecKind uses.
std::string_view structured_kind_name(StructuredOutput::Kind k);

// Reads the structured-output fields of a request body (the raw text, so that a schema keeps its key order).
// InvalidArgument for a wrong shape or for two of them at once; `param` is set to the offending field.
Status parse_structured_output(std::string_view body, StructuredOutput& out, std::string& param);

// The "structured" object of /internal/pd/prefill, and back (untrusted input: checked like a client's).
nlohmann::json structured_to_json(const StructuredOutput& s);
Result<StructuredOutput> structured_from_json(const nlohmann::json& j);

}  // namespace tessera::api
