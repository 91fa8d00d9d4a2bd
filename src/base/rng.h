// Rng: the xorshift64* generator of llama2.c's run.c, so that a seeded sampling run can be compared with
// the reference implementation token for token. Not cryptographic. One per sampler; not thread-safe.
#pragma once

#include <cmath>
#include <cstdint>

namespace tessera {

class Rng {
 public:
  // A zero state would stay zero forever; it is replaced by a fixed non-zero constant.
  explicit Rng(uint64_t seed) : state_(seed != 0 ? seed : 0x9E3779B97F4A7C15ull) {}

  uint32_t next_u32() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  }
  // Uniform in [0, 1) with 24 bits of resolution.
  float next_f32() { return static_cast<float>(next_u32() >> 8) / 16777216.0f; }
  // Standard normal (Box-Muller; one value per call).
  float next_normal() {
    float u1 = next_f32();
    float u2 = next_f32();
    if (u1 < 1e-7f) u1 = 1e-7f;
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace tessera
