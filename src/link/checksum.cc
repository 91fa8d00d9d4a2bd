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

uint64_t checksum64(const void* data, size_t length) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t a[4] = {1, 2, 3, 4};
  uint64_t b[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= length; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    for (int k = 0; k < 4; ++k) {
      a[k] += w[k];
      b[k] += a[k];
    }
  }
  uint64_t tail[4] = {0, 0, 0, 0};
  std::memcpy(tail, p + i, length - i);
  for (int k = 0; k < 4; ++k) {
    a[k] += tail[k];
    b[k] += a[k];
  }
  uint64_t h = mix(length ^ 0x9e3779b97f4a7c15ull);
  for (int k = 0; k < 4; ++k) h = mix(h ^ a[k]) + mix(b[k] + static_cast<uint64_t>(k));
  return h;
}

}  // namespace tessera::link
