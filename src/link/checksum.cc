#include "link/checksum.h"

#include <algorithm>
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

// Eight 64-bit lanes. Each lane keeps a running sum `a` and a sum of sums `b` (Fletcher), so both a changed
// word and a moved word change the result. Lane j takes the j-th word of every 64-byte block. Two builds of
// the same loop (GCC vector extensions, named registers unrolled by hand: at -O2 GCC keeps arrays indexed
// in a loop in memory): four 2-lane vectors (SSE2 on x86-64, NEON on aarch64, no ISA flags needed) and, on
// x86-64 CPUs that have it, two 4-lane AVX2 vectors, which halves the instructions per block. Both give the
// same lanes, so the same value.
namespace {

using V2 = uint64_t __attribute__((vector_size(16)));

void blocks_v2(uint64_t* a, uint64_t* b, const unsigned char* p, size_t count) {
  V2 a0, a1, a2, a3, b0, b1, b2, b3;
  std::memcpy(&a0, a + 0, 16), std::memcpy(&a1, a + 2, 16), std::memcpy(&a2, a + 4, 16);
  std::memcpy(&a3, a + 6, 16);
  std::memcpy(&b0, b + 0, 16), std::memcpy(&b1, b + 2, 16), std::memcpy(&b2, b + 4, 16);
  std::memcpy(&b3, b + 6, 16);
  for (size_t i = 0; i < count; ++i, p += 64) {
    V2 w0, w1, w2, w3;
    std::memcpy(&w0, p, 16);
    std::memcpy(&w1, p + 16, 16);
    std::memcpy(&w2, p + 32, 16);
    std::memcpy(&w3, p + 48, 16);
    a0 += w0;
    a1 += w1;
    a2 += w2;
    a3 += w3;
    b0 += a0;
    b1 += a1;
    b2 += a2;
    b3 += a3;
  }
  std::memcpy(a + 0, &a0, 16), std::memcpy(a + 2, &a1, 16), std::memcpy(a + 4, &a2, 16);
  std::memcpy(a + 6, &a3, 16);
  std::memcpy(b + 0, &b0, 16), std::memcpy(b + 2, &b1, 16), std::memcpy(b + 4, &b2, 16);
  std::memcpy(b + 6, &b3, 16);
}

#if defined(__x86_64__)
using V4 = uint64_t __attribute__((vector_size(32)));

__attribute__((target("avx2"))) void blocks_v4(uint64_t* a, uint64_t* b, const unsigned char* p, size_t count) {
  V4 a0, a1, b0, b1;
  std::memcpy(&a0, a + 0, 32), std::memcpy(&a1, a + 4, 32);
  std::memcpy(&b0, b + 0, 32), std::memcpy(&b1, b + 4, 32);
  for (size_t i = 0; i < count; ++i, p += 64) {
    V4 w0, w1;
    std::memcpy(&w0, p, 32);
    std::memcpy(&w1, p + 32, 32);
    a0 += w0;
    a1 += w1;
    b0 += a0;
    b1 += a1;
  }
  std::memcpy(a + 0, &a0, 32), std::memcpy(a + 4, &a1, 32);
  std::memcpy(b + 0, &b0, 32), std::memcpy(b + 4, &b1, 32);
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif

}  // namespace

void Checksum64::blocks(const unsigned char* p, size_t count) {
#if defined(__x86_64__)
  if (kHaveAvx2) return blocks_v4(a_, b_, p, count);
#endif
  blocks_v2(a_, b_, p, count);
}

void Checksum64::update(const void* data, size_t length) {
  if (length == 0) return;  // data may be null
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += length;
  if (carry_len_ > 0) {
    const size_t take = std::min(length, sizeof carry_ - carry_len_);
    std::memcpy(carry_ + carry_len_, p, take);
    carry_len_ += take;
    p += take;
    length -= take;
    if (carry_len_ < sizeof carry_) return;
    blocks(carry_, 1);
    carry_len_ = 0;
  }
  blocks(p, length / 64);
  carry_len_ = length % 64;
  std::memcpy(carry_, p + (length - carry_len_), carry_len_);
}

uint64_t Checksum64::value() const {
  // The last, partial block (possibly empty) counts once more, zero-padded.
  Checksum64 end = *this;
  std::memset(end.carry_ + end.carry_len_, 0, sizeof end.carry_ - end.carry_len_);
  end.blocks(end.carry_, 1);
  uint64_t h = mix(length_ ^ 0x9e3779b97f4a7c15ull);
  for (int j = 0; j < 8; ++j) h = mix(h ^ end.a_[j]) + mix(end.b_[j] + static_cast<uint64_t>(j));
  return h;
}

uint64_t checksum64(const void* data, size_t length) {
  Checksum64 c;
  c.update(data, length);
  return c.value();
}

}  // namespace tessera::link
