#include "grammar/utf8_ranges.h"

#include <algorithm>
#include <string>
#include <string_view>

namespace tessera::grammar {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* out) {
  switch (encoded_length(cp)) {
    case 1:
      out[0] = static_cast<uint8_t>(cp);
      break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
  }
}

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negated) {
  for (CodeRange& r : ranges) {
    if (r.lo > r.hi) std::swap(r.lo, r.hi);
    r.hi = std::min(r.hi, kMaxCodePoint);
  }
  std::erase_if(ranges, [](const CodeRange& r) { return r.lo > kMaxCodePoint; });
  std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> merged;
  for (const CodeRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<CodeRange> out;
    uint32_t next = 0;
    for (const CodeRange& r : merged) {
      if (r.lo > next) out.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    merged = std::move(out);
  }
  // Cut the surrogates out.
  std::vector<CodeRange> out;
  for (const CodeRange& r : merged) {
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      out.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo) out.push_back({r.lo, kSurrogateLo - 1});
    if (r.hi > kSurrogateHi) out.push_back({kSurrogateHi + 1, r.hi});
  }
  return out;
}

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  // Split at the encoded-length boundaries first: each piece then has one length.
  static constexpr uint32_t kLast[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t boundary : kLast) {
    if (lo <= boundary && boundary < hi) {
      utf8_sequences(lo, boundary, out);
      utf8_sequences(boundary + 1, hi, out);
      return;
    }
  }
  const int n = encoded_length(lo);
  // Then until every continuation byte position runs over a full 80-BF below a shared prefix: a range like
  // [U+0801, U+0FFF] is [U+0801, U+083F] (fixed second byte) plus [U+0840, U+0FFF].
  for (int i = 1; i < n; ++i) {
    const uint32_t low_bits = (1u << (6 * i)) - 1;
    if ((lo & ~low_bits) == (hi & ~low_bits)) continue;
    if ((lo & low_bits) != 0) {
      utf8_sequences(lo, lo | low_bits, out);
      utf8_sequences((lo | low_bits) + 1, hi, out);
      return;
    }
    if ((hi & low_bits) != low_bits) {
      utf8_sequences(lo, (hi & ~low_bits) - 1, out);
      utf8_sequences(hi & ~low_bits, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  ByteRangeSeq seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

void append_utf8(uint32_t cp, std::string& out) {
  uint8_t b[4];
  encode(cp, b);
  out.append(reinterpret_cast<const char*>(b), static_cast<size_t>(encoded_length(cp)));
}

uint32_t next_code_point(std::string_view text, size_t& i, bool* ok) {
  const auto c = static_cast<uint8_t>(text[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 1) {
    ++i;
    return c;
  }
  if (n == 0 || i + static_cast<size_t>(n) > text.size()) {
    if (ok) *ok = false;
    ++i;
    return c;
  }
  uint32_t cp = c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) {
    const auto cc = static_cast<uint8_t>(text[i + static_cast<size_t>(k)]);
    if ((cc & 0xC0) != 0x80) {
      if (ok) *ok = false;
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += static_cast<size_t>(n);
  return cp;
}

}  // namespace tessera::grammar
