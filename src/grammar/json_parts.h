// Building blocks of the JSON Schema front end (json_schema.cc): grammar expressions for JSON's primitive values,
// string formats, integer ranges, and the rewriting of a text expression into the JSON string that encodes it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/ast.h"

namespace tessera::grammar::json {

// One character inside a JSON string, escapes included; \u escapes name no surrogate, so that each character
// of the grammar is one code point (what minLength and maxLength count).
Expr string_char();
// A JSON string's characters without escapes (object keys that must differ from a set of names).
Expr plain_string_char();
// Decimal integers with at most 16 digits; numbers with a fraction of at most 16 digits and a two-digit exponent.
Expr integer_expr();
Expr number_expr();

// The text of a string in `format` (date, time, date-time, duration, email, hostname, ipv4, ipv6, uuid, uri),
// as the characters between the quotes; nullopt for a format this compiler does not know (an annotation then).
std::optional<std::string> format_regex(const std::string& format);

// The JSON-string encoding of texts matched by `e`: characters that JSON must escape (", \, controls) become
// their escapes; everything else stands for itself.
Expr json_encoded(const Expr& e);

// Integers in [lo, hi] (either bound optional; unbounded sides stop at 16 digits). InvalidArgument when empty.
Result<Expr> integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The characters of a JSON object key other than every name in `names` (none of which may be written with
// escapes here: the key's characters are plain_string_char()), between the quotes.
Expr key_not_in(const std::vector<std::string>& names);

}  // namespace tessera::grammar::json
