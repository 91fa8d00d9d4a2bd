#include "base/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"

namespace tessera {
namespace {

TEST(Half, KnownBitPatterns) {
  // IEEE 754 binary16: 1.0 = 0x3C00, -2.0 = 0xC000, 65504 = 0x7BFF (max), 2^-24 = 0x0001 (min subnormal).
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);  // overflow to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // Ties round to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
}

TEST(Quant, Q8AndQ4ErrorsAreWithinTheirStepSize) {
  Rng rng(5);
  std::vector<float> x(256);
  for (float& v : x) v = rng.next_normal();
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> q(dtype_bytes(t, x.size()));
    ASSERT_TRUE(quantize(x, t, q.data()).ok());
    std::vector<float> y(x.size());
    ASSERT_TRUE(dequantize(q.data(), t, y).ok());
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (size_t i = b; i < b + 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      // Half a quantisation step (plus the f16 rounding of the scale) bounds the error; q4_0's range [-8, 7]
      // is asymmetric, so a value of the opposite sign to the largest one may be clamped by a whole step.
      float step = t == DType::kQ8_0 ? amax / 127 : t == DType::kQ4_0 ? amax / 8 : amax / 128;
      float bound = (t == DType::kQ4_0 ? 1.01f : 0.51f) * step + 1e-3f;
      for (size_t i = b; i < b + 32; ++i) EXPECT_LE(std::fabs(x[i] - y[i]), bound) << dtype_name(t);
    }
  }
}

TEST(Quant, Q4LayoutPutsElementJAndJPlus16InOneByte) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;  // the largest magnitude: scale d = 1, so q = x + 8
  x[16] = 7.0f;
  x[1] = 3.0f;
  BlockQ4_0 b;
  ASSERT_TRUE(quantize(x, DType::kQ4_0, &b).ok());
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 0x00 | (15 << 4));  // element 0 -> 0, element 16 -> 15
  EXPECT_EQ(b.qs[1] & 0x0f, 11);         // 3 + 8
  EXPECT_EQ(b.qs[1] >> 4, 8);            // element 17 is 0
}

TEST(Quant, RejectsPartialBlocks) {
  std::vector<float> x(33);
  std::vector<uint8_t> q(100);
  EXPECT_EQ(quantize(x, DType::kQ8_0, q.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize(x, DType::kI32, q.data()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
