// Spec: what a request asks to constrain its output to, before any compiling: a JSON schema, any JSON object, a
// regular expression, a list of choices, or a GBNF grammar (the request forms of api/structured_output.h map here).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::grammar {

enum class SpecKind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoice, kGbnf };

struct Spec {
  SpecKind kind = SpecKind::kJsonObject;
  std::string text;        // the schema (JSON), the regex, the choices (a JSON array of strings), the GBNF text
  std::string whitespace;  // JSON kinds: a regex for the whitespace between tokens ("" for the default)

  std::string key() const;
};

// "json_schema", "json_object", "regex", "choice", "grammar".
std::string_view spec_kind_name(SpecKind k);
Result<SpecKind> parse_spec_kind(std::string_view name);

}  // namespace tessera::grammar
