// ByteSet: a set of byte values (256 bits), the terminal of the byte-level grammar.
//
// Thread-safety: a value type.
#pragma once

#include <bit>
#include <cstdint>

namespace tessera::grammar {

struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};

  bool has(uint8_t b) const { return ((w[b >> 6] >> (b & 63)) & 1u) != 0; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  int count() const { return std::popcount(w[0]) + std::popcount(w[1]) + std::popcount(w[2]) + std::popcount(w[3]); }
  // The smallest member; 256 when empty.
  int first() const {
    for (int i = 0; i < 4; ++i)
      if (w[i] != 0) return i * 64 + std::countr_zero(w[i]);
    return 256;
  }
  bool operator==(const ByteSet& o) const {
    return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2] && w[3] == o.w[3];
  }
  static ByteSet single(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
};

}  // namespace tessera::grammar
