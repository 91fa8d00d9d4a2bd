// UTF-8 encodings of code-point ranges: what turns a character class of the syntax tree into byte-level
// alternatives. A range [lo, hi] becomes a few byte-range sequences whose concatenations are exactly the UTF-8
// encodings of lo..hi (surrogates excluded), e.g. [U+0080, U+07FF] -> [C2-DF][80-BF].
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/ast.h"

namespace tessera::grammar {

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged ranges; with `negated`, every code point outside them. Surrogates (U+D800..U+DFFF), which
// UTF-8 cannot encode, are left out either way.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negated);

// Appends the byte-range sequences of [lo, hi] (lo <= hi <= kMaxCodePoint, no surrogates inside) to `out`.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out);

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(uint32_t cp, std::string& out);

// Decodes one code point at text[i] and advances i; a malformed byte decodes as itself (so any byte string
// round-trips) and sets `ok` false.
uint32_t next_code_point(std::string_view text, size_t& i, bool* ok = nullptr);

}  // namespace tessera::grammar
