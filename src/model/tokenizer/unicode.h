// Small UTF-8 and Unicode helpers for the tokenizers (normalisation forms through ICU).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::model {

// Decodes the code point at s[i] and advances i. An invalid or truncated sequence yields U+FFFD and
// advances one byte.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);
// Bytes of the UTF-8 sequence starting with lead byte c (1 for an invalid lead byte).
size_t utf8_seq_len(unsigned char c);

enum class NormalForm : uint8_t { kNfc, kNfkc, kNfd, kNfkd };
// Invalid UTF-8 is returned unchanged.
std::string unicode_normalize(std::string_view s, NormalForm form);
std::string unicode_lowercase(std::string_view s);

}  // namespace tessera::model
