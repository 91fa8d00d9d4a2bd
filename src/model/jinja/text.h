// String helpers for the Jinja engine that follow JavaScript's definitions, because the renderer Tessera
// agrees with (@huggingface/jinja) runs on JavaScript strings: whitespace is JavaScript's \s (ASCII
// whitespace plus the Unicode space separators, U+2028/9 and U+FEFF), lengths count UTF-16 code units,
// and slicing walks code points. Text is UTF-8 throughout; invalid bytes count as one code point each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::model::jinja {

// The code point at s[i] and its byte length (a lone invalid byte is returned as itself, length 1).
char32_t decode_utf8(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t cp);
bool js_is_space(char32_t cp);
// Byte length of the JavaScript whitespace character at s[i], 0 when there is none.
size_t js_space_len(std::string_view s, size_t i);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);
std::string_view js_trim(std::string_view s);
size_t utf16_length(std::string_view s);
std::vector<std::string> code_points(std::string_view s);
// ASCII case mapping; other characters are kept (chat templates case-map role names and keywords).
std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
// JSON.stringify of a string; with ensure_ascii every character from U+007F up is \uXXXX (UTF-16 units).
std::string json_quote(std::string_view s, bool ensure_ascii);

}  // namespace tessera::model::jinja
