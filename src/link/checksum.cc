#include "link/checksum.h"

#include <cstring>

namespace tessera::link {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

// Eight 64-bit lanes as four 2-lane vectors (GCC vector extensions: SSE2 on x86-64, NEON on aarch64, no
// ISA flags needed). Each lane keeps a running sum `a` and a sum of sums `b` (Fletcher), so both a changed
// word and a moved word change the result.
uint64_t checksum64(const void* data, size_t length) {
  using V = uint64_t __attribute__((vector_size(16)));
  const auto* p = static_cast<const unsigned char*>(data);
  V a[4] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  V b[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
  size_t i = 0;
  // Named registers, unrolled by hand: at -O2 GCC keeps arrays indexed in a loop in memory.
  V a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
  for (; i + 64 <= length; i += 64) {
    V w0, w1, w2, w3;
    std::memcpy(&w0, p + i, 16);
    std::memcpy(&w1, p + i + 16, 16);
    std::memcpy(&w2, p + i + 32, 16);
    std::memcpy(&w3, p + i + 48, 16);
    a0 += w0;
    a1 += w1;
    a2 += w2;
    a3 += w3;
    b0 += a0;
    b1 += a1;
    b2 += a2;
    b3 += a3;
  }
  a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3;
  unsigned char tail[64] = {};
  if (length > i) std::memcpy(tail, p + i, length - i);  // p may be null when length is 0
  for (int k = 0; k < 4; ++k) {
    V w;
    std::memcpy(&w, tail + 16 * k, 16);
    a[k] += w;
    b[k] += a[k];
  }
  uint64_t h = mix(length ^ 0x9e3779b97f4a7c15ull);
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 2; ++j) h = mix(h ^ a[k][j]) + mix(b[k][j] + static_cast<uint64_t>(2 * k + j));
  }
  return h;
}

}  // namespace tessera::link
