// JSON Schema -> grammar: the subset that OpenAI's strict mode and vLLM accept.
//
//   type (one or a list), enum, const, nullable (OpenAPI);
//   objects: properties (in the schema's order), required, additionalProperties (false, true or a schema; when
//     absent, only the listed properties are generated, as xgrammar's strict mode does; an object schema that lists
//     no properties takes any members);
//   arrays: items, prefixItems, minItems, maxItems;
//   strings: minLength, maxLength, pattern, format (date, time, date-time, duration, email, hostname, ipv4, ipv6,
//     uuid, uri; other formats are annotations and ignored);
//   integers and numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers with bounds are generated
//     as integers or decimals that lie within them);
//   anyOf, oneOf (as anyOf: branches should not overlap), allOf of object schemas (merged), $ref to "#", "#/$defs/...",
//     "#/definitions/..." or any JSON pointer into the document, recursive references included.
// Keywords that constrain values in ways a grammar cannot (multipleOf, uniqueItems, not, if/then/else,
// patternProperties, contains, min/maxProperties, dependent*...) are refused, never silently dropped. Errors are
// InvalidArgument naming the JSON pointer of the offending schema.
//
// Whitespace between tokens is nothing, one space, or a line break followed by at most 32 spaces or tabs (bounded,
// so a model cannot wander off in blanks), or what `whitespace_regex` allows (vLLM's guided_whitespace_pattern).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/ast.h"

namespace tessera::grammar {

struct JsonSchemaOptions {
  std::string whitespace_regex;  // "" for the default
};

Result<Ast> json_schema_grammar(std::string_view schema_json, const JsonSchemaOptions& options = {});
// Any JSON object (response_format json_object).
Result<Ast> json_object_grammar(const JsonSchemaOptions& options = {});

}  // namespace tessera::grammar
