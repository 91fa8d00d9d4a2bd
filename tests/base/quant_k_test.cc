// The block types beyond q8_0 / q4_0, checked against values computed here from ggml's published layouts
// (ggml-common.h's block structs, ggml-quants.c's dequantize_row_*): each test builds blocks byte by byte
// with known fields and compares dequantize() with the formula evaluated in the test. The packing of
// llama.cpp's own files is checked separately (tests/model/llamacpp_quant_test.cc, against llama-quantize).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"

namespace tessera {
namespace {

constexpr uint16_t kHalf = 0x3800;      // 0.5
constexpr uint16_t kQuarter = 0x3400;   // 0.25
constexpr uint16_t kMinusOne = 0xBC00;  // -1.0
constexpr uint16_t kEighth = 0x3000;    // 0.125

template <typename B>
std::vector<float> decode(const B& b, DType t) {
  std::vector<float> y(static_cast<size_t>(dtype_info(t).block_elems));
  EXPECT_TRUE(dequantize(&b, t, y).ok());
  return y;
}

TEST(QuantK, Q4_1IsScaleTimesNibblePlusMin) {
  BlockQ4_1 b;
  b.d = kHalf;
  b.m = kMinusOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = decode(b, DType::kQ4_1);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 1.0f) << j;
  }
}

// mxfp4 (OCP MX, as ggml stores it): E2M1 codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6 (8..15 their negatives) times
// the block's 2^(e - 127). ggml doubles the codes and halves the scale; the values are the same.
TEST(QuantK, Mxfp4IsE2M1TimesAPowerOfTwo) {
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint8_t e : {uint8_t{127}, uint8_t{130}, uint8_t{120}, uint8_t{1}}) {
    BlockMXFP4 b;
    b.e = e;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    auto y = decode(b, DType::kMXFP4);
    const float scale = std::ldexp(1.0f, static_cast<int>(e) - 127);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], e2m1[j] * scale) << int{e} << " " << j;
      EXPECT_EQ(y[j + 16], e2m1[15 - j] * scale) << int{e} << " " << j;
    }
  }
  // llama.cpp's quantiser: the scale makes the largest magnitude land in [4, 8) code units; 6 -> code 7.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[17] = -1.5f;
  BlockMXFP4 q;
  ASSERT_TRUE(quantize(x, DType::kMXFP4, &q).ok());
  EXPECT_EQ(q.e, 127 + 2 - 2);  // floor(log2 6) - 2 + 127
  auto y = decode(q, DType::kMXFP4);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[17], -1.5f);
}

TEST(QuantK, Q5_0TakesTheFifthBitFromQh) {
  BlockQ5_0 b;
  b.d = kQuarter;
  const uint32_t qh = 0xA5C3'0F81u;
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((j * 7) & 15) | (((j * 3) & 15) << 4));
  auto y = decode(b, DType::kQ5_0);
  for (int i = 0; i < 32; ++i) {
    const int nibble = i < 16 ? (i * 7) & 15 : ((i - 16) * 3) & 15;
    const int q = nibble + 16 * static_cast<int>((qh >> i) & 1);
    EXPECT_EQ(y[i], 0.25f * static_cast<float>(q - 16)) << i;
  }
}

TEST(QuantK, Q5_1IsScaleTimesFiveBitsPlusMin) {
  BlockQ5_1 b;
  b.d = kEighth;
  b.m = kHalf;
  const uint32_t qh = 0x1234'5678u;
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((j ^ 5) << 4));
  auto y = decode(b, DType::kQ5_1);
  for (int i = 0; i < 32; ++i) {
    const int nibble = i < 16 ? i : ((i - 16) ^ 5);
    const int q = nibble + 16 * static_cast<int>((qh >> i) & 1);
    EXPECT_EQ(y[i], 0.125f * static_cast<float>(q) + 0.5f) << i;
  }
}

// q4_k / q5_k: eight (scale, min) pairs of six bits in twelve bytes, as get_scale_min_k4 reads them.
void pack_scale_min(const int sc[8], const int m[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}
const int kSc[8] = {1, 2, 17, 63, 33, 47, 60, 5};  // 4..7 use the top two bits
const int kMin[8] = {0, 5, 10, 62, 20, 40, 50, 63};

TEST(QuantK, Q4_KSubBlocksOf32WithSixBitScalesAndMins) {
  BlockQ4_K b;
  b.d = kQuarter;
  b.dmin = kEighth;
  pack_scale_min(kSc, kMin, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
  auto y = decode(b, DType::kQ4_K);
  for (int e = 0; e < 256; ++e) {
    // 64 elements per 32 bytes: the first 32 in the low nibbles, the next 32 in the high ones.
    const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
    const int q = e % 64 < 32 ? byte & 15 : byte >> 4;
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.25f * kSc[j] * q - 0.125f * kMin[j]) << e;
  }
}

TEST(QuantK, Q5_KAddsTheFifthBitFromQh) {
  BlockQ5_K b;
  b.d = kHalf;
  b.dmin = kQuarter;
  pack_scale_min(kSc, kMin, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 53 + 7) & 0xff);
  for (int i = 0; i < 32; ++i) b.qh[i] = static_cast<uint8_t>((i * 29 + 3) & 0xff);
  auto y = decode(b, DType::kQ5_K);
  for (int e = 0; e < 256; ++e) {
    const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
    const int q = (e % 64 < 32 ? byte & 15 : byte >> 4) + 16 * ((b.qh[e % 32] >> (e / 32)) & 1);
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.5f * kSc[j] * q - 0.25f * kMin[j]) << e;
  }
}

TEST(QuantK, Q6_KSixBitsMinus32WithSignedScalesPer16) {
  BlockQ6_K b;
  b.d = kEighth;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>((i * 71 + 5) & 0xff);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>((i * 23 + 9) & 0xff);
  const int8_t scales[16] = {1, -1, 127, -128, 5, -7, 64, -64, 3, 9, -3, -9, 100, -100, 0, 42};
  std::memcpy(b.scales, scales, 16);
  auto y = decode(b, DType::kQ6_K);
  for (int e = 0; e < 256; ++e) {
    // Per 128-element half: ql bytes 0-31 hold elements 0-31 (low nibble) and 64-95 (high), bytes 32-63
    // elements 32-63 and 96-127; qh byte l holds the top two bits of elements l, l+32, l+64, l+96.
    const int h = e / 128, r = e % 128, l = r % 32;
    const uint8_t lo_byte = b.ql[64 * h + (r % 64 >= 32 ? 32 : 0) + l];
    const int lo = r >= 64 ? lo_byte >> 4 : lo_byte & 15;
    const int hi = (b.qh[32 * h + l] >> (2 * (r / 32))) & 3;
    EXPECT_EQ(y[e], 0.125f * scales[e / 16] * ((lo | (hi << 4)) - 32)) << e;
  }
}

TEST(QuantK, Q3_KHighBitClearMeansMinusFour) {
  BlockQ3_K b;
  b.d = kHalf;
  for (int i = 0; i < 32; ++i) b.hmask[i] = static_cast<uint8_t>((i * 41 + 1) & 0xff);
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>((i * 19 + 13) & 0xff);
  // Sixteen six-bit scales stored offset by 32: low nibbles in bytes 0-7 (scales 0-7 low, 8-15 high), top
  // two bits in bytes 8-11 (scale i at bit 2 * (i / 4) of byte 8 + i % 4).
  const int sc[16] = {0, 1, 31, 32, 33, 63, 16, 48, 7, 40, 25, 60, 2, 59, 30, 34};
  std::memset(b.scales, 0, 12);
  for (int i = 0; i < 16; ++i) {
    b.scales[i % 8] |= static_cast<uint8_t>((sc[i] & 15) << (i < 8 ? 0 : 4));
    b.scales[8 + i % 4] |= static_cast<uint8_t>((sc[i] >> 4) << (2 * (i / 4)));
  }
  auto y = decode(b, DType::kQ3_K);
  for (int e = 0; e < 256; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
    const int q = low - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
    EXPECT_EQ(y[e], 0.5f * (sc[e / 16] - 32) * q) << e;
  }
}

TEST(QuantK, Q2_KTwoBitsWithFourBitScaleAndMin) {
  BlockQ2_K b;
  b.d = kHalf;
  b.dmin = kQuarter;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<uint8_t>(((i * 5) & 15) | (((15 - i) & 15) << 4));
  for (int i = 0; i < 64; ++i) b.qs[i] = static_cast<uint8_t>((i * 89 + 31) & 0xff);
  auto y = decode(b, DType::kQ2_K);
  for (int e = 0; e < 256; ++e) {
    const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
    const int s = b.scales[e / 16];
    EXPECT_EQ(y[e], 0.5f * (s & 15) * q - 0.25f * (s >> 4)) << e;
  }
}

// quantize() then dequantize(): the error of each element stays within a bound set by the type's bits and
// the group's range; a constant-zero input decodes to zeros (no NaN from a zero scale).
TEST(QuantK, RoundTripErrorIsBoundedPerType) {
  Rng rng(11);
  std::vector<float> x(1024);
  for (float& v : x) v = rng.next_normal();
  const struct {
    DType t;
    double max_nmse;
  } kTypes[] = {{DType::kQ4_1, 0.01}, {DType::kQ5_0, 0.003}, {DType::kQ5_1, 0.003}, {DType::kQ2_K, 0.15},
                {DType::kQ3_K, 0.05}, {DType::kQ4_K, 0.012}, {DType::kQ5_K, 0.003}, {DType::kQ6_K, 0.0008}};
  for (auto [t, bound] : kTypes) {
    std::vector<uint8_t> q(dtype_bytes(t, x.size()));
    ASSERT_TRUE(quantize(x, t, q.data()).ok());
    std::vector<float> y(x.size());
    ASSERT_TRUE(dequantize(q.data(), t, y).ok());
    double err = 0, sig = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      sig += x[i] * x[i];
    }
    EXPECT_LT(err / sig, bound) << dtype_name(t);
    EXPECT_GT(err / sig, bound / 100) << dtype_name(t) << ": suspiciously exact";
    std::vector<float> zeros(x.size(), 0.0f);
    ASSERT_TRUE(quantize(zeros, t, q.data()).ok());
    ASSERT_TRUE(dequantize(q.data(), t, y).ok());
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(QuantK, SizesAndPartialSuperBlocks) {
  EXPECT_EQ(dtype_bytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(dtype_bytes(DType::kQ6_K, 256), 210u);
  EXPECT_EQ(dtype_bytes(DType::kQ5_1, 64), 48u);
  std::vector<float> x(288);  // nine classic blocks, not a whole number of super-blocks
  std::vector<uint8_t> q(1000);
  EXPECT_TRUE(quantize(x, DType::kQ5_0, q.data()).ok());
  EXPECT_EQ(quantize(x, DType::kQ4_K, q.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_dtype("Q4_K"), DType::kQ4_K);
  EXPECT_EQ(parse_dtype("q6_k"), DType::kQ6_K);
  EXPECT_FALSE(parse_dtype("q7_k").has_value());
}

}  // namespace
}  // namespace tessera
