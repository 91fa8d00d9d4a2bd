// Scalar conversions between f32 and the stored weight / cache types: f16, bf16, and GGUF's q8_0 and q4_0
// blocks. These are the reference definitions (file readers, writers and the ref backend use them); fast
// backends have their own kernels and are tested against these.
//
// Block layouts (GGUF / ggml), 32 elements per block:
//   q8_0: f16 scale d, then 32 x int8 q;            x = d * q
//   q4_0: f16 scale d, then 16 bytes of nibbles;    x = d * (nibble - 8); byte j holds element j in its low
//         nibble and element j + 16 in its high nibble.
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
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "GGUF block sizes");

// Converts n f32 values into `dst` of type `to` (dtype_bytes(to, n) bytes). InvalidArgument when n is not a
// multiple of the block size of a block type, or `to` is not a storage type.
Status quantize(std::span<const float> src, DType to, void* dst);
// Converts n values of type `from` at `src` into f32.
Status dequantize(const void* src, DType from, std::span<float> dst);

}  // namespace tessera
