// Scalar conversions between f32 and the stored weight / cache types: f16, bf16, and GGUF's block types.
// These are the reference definitions (file readers, writers and the ref backend use them); fast backends
// have their own kernels and are tested against these.
//
// Block layouts (GGUF / ggml, little-endian, f16 = IEEE half). Classic types, 32 elements per block; in
// every 4- and 5-bit type byte j holds element j in its low nibble and element j + 16 in its high nibble,
// and bit j of the 32-bit qh is the fifth bit of element j:
//   q8_0: d, int8 q[32];                  x = d * q
//   q4_0: d, nibbles[16];                 x = d * (q - 8)
//   q4_1: d, m, nibbles[16];              x = d * q + m
//   q5_0: d, qh[4], nibbles[16];          x = d * (q - 16)
//   q5_1: d, m, qh[4], nibbles[16];       x = d * q + m
//   mxfp4: e (E8M0), nibbles[16];         x = kMxfp4Values[q] * 2^(e - 128)  (ggml doubles the E2M1 values
//                                          and halves the scale: the same numbers, integer-valued codes)
// K-quants, 256 elements per super-block (element e below is 0..255):
//   q2_k: scales[16] (low nibble: scale, high: min, of the 16-element group e/16), qs[64], d, dmin;
//         q = (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;   x = d * sc * q - dmin * m
//   q3_k: hmask[32], qs[64] (as q2_k), scales[12] (16 six-bit values, see unpack_q3_k_scales), d;
//         q = low 2 bits - (bit e / 32 of hmask[e % 32] ? 0 : 4);         x = d * (sc - 32) * q
//   q4_k: d, dmin, scales[12] (8 six-bit scale/min pairs of the 32-element groups, see unpack_k4_scale),
//         qs[128]: element e is in byte 32 * (e / 64) + e % 32, low nibble when e % 64 < 32;
//                                                                          x = d * sc * q - dmin * m
//   q5_k: as q4_k plus qh[32] before qs: bit e / 32 of qh[e % 32] is the fifth bit (+16)
//   q6_k: ql[128], qh[64], int8 scales[16] (per 16 elements), d; in each half h = e / 128, group
//         g = e % 128 / 32, l = e % 32: low 4 bits from ql[64h + 32 (g & 1) + l] (high nibble when g >= 2),
//         high 2 bits from qh[32h + l] >> 2g;                              x = d * sc * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/dtype.h"
#include "base/status.h"

namespace tessera {

uint16_t f32_to_f16(float f);  // round to nearest even; overflow to inf; NaN stays NaN
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

constexpr int kQuantBlock = 32;
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQuantBlock];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};

struct BlockMXFP4 {
  uint8_t e;  // E8M0: the block's scale is 2^(e - 127); with the doubled codes below, 2^(e - 128)
  uint8_t qs[kQuantBlock / 2];
};
// The 16 E2M1 codes times two (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), as ggml's kvalues_mxfp4.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) exactly, as ggml's GGML_E8M0_TO_FP32_HALF (denormal for e < 2).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

constexpr int kSuperBlock = 256;
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24,
              "GGUF block sizes");
static_assert(sizeof(BlockMXFP4) == 17, "GGUF mxfp4 block size");
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "GGUF K-quant block sizes");

// The j-th (0..7) six-bit scale and min of a q4_k / q5_k super-block: bytes 0-3 hold scales 0-3 (low six
// bits), 4-7 mins 0-3; scales and mins 4-7 keep their low four bits in bytes 8-11 (scale low nibble, min
// high nibble) and their top two bits in the top bits of bytes 0-3 (scales) and 4-7 (mins).
inline void unpack_k4_scale(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// The 16 six-bit scales of a q3_k super-block, still offset by 32: value i keeps its low four bits in byte
// i % 8 (low nibble for i < 8, high nibble otherwise) and its top two bits in byte 8 + i % 4 at bit 2 * (i / 4).
inline void unpack_q3_k_scales(const uint8_t* s, int out[16]) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
    out[i] = low | (((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
  }
}

// Converts n f32 values into `dst` of type `to` (dtype_bytes(to, n) bytes). InvalidArgument when n is not a
// multiple of the block size of a block type, or `to` is not a storage type.
Status quantize(std::span<const float> src, DType to, void* dst);
// Converts n values of type `from` at `src` into f32.
Status dequantize(const void* src, DType from, std::span<float> dst);

// The block types added with the K-quants (q4_1, q5_0, q5_1, q2_k ... q6_k, and mxfp4), in quant_k.cc; quantize() and
// dequantize() forward to these. The quantisers are simple (per-group min/max, then the group scales
// quantised against the super-block's), not llama-quantize's searched ones: they make valid blocks for tests
// and `tessera synth`; files quantised by llama.cpp load as written.
void quantize_blocks(const float* x, size_t n, DType to, void* dst);
void dequantize_blocks(const void* src, DType from, size_t n, float* dst);

}  // namespace tessera
