#include "base/quant.h"

#include <cmath>
#include <cstring>

#include <fmt/core.h>

namespace tessera {

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf / NaN
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow to zero
    mant |= 0x800000u;                                // subnormal: shift the implicit bit in
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | half);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int i = 0; i < kQuantBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_f16(d);
  for (int i = 0; i < kQuantBlock; ++i) b->qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
}

void quantize_q4_0(const float* x, BlockQ4_0* b) {
  // The scale maps the element of largest magnitude to -8, so its sign uses the asymmetric end of [-8, 7].
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQuantBlock; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_f16(d);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    auto q = [&](float v) {
      int n = static_cast<int>(v * id + 8.5f);
      return static_cast<uint8_t>(n < 0 ? 0 : (n > 15 ? 15 : n));
    };
    b->qs[j] = static_cast<uint8_t>(q(x[j]) | (q(x[j + kQuantBlock / 2]) << 4));
  }
}

Status check_count(DType t, size_t n) {
  const int block = dtype_info(t).block_elems;
  if (n % static_cast<size_t>(block) != 0) {
    return invalid_argument(
        fmt::format("{} values cannot be stored as {}: not a multiple of {}", n, dtype_name(t), block));
  }
  return ok_status();
}

}  // namespace

Status quantize(std::span<const float> src, DType to, void* dst) {
  TS_RETURN_IF_ERROR(check_count(to, src.size()));
  const size_t n = src.size();
  switch (to) {
    case DType::kF32:
      std::memcpy(dst, src.data(), n * 4);
      return ok_status();
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return ok_status();
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return ok_status();
    case DType::kQ8_0:
      for (size_t b = 0; b < n / kQuantBlock; ++b)
        quantize_q8_0(src.data() + b * kQuantBlock, static_cast<BlockQ8_0*>(dst) + b);
      return ok_status();
    case DType::kQ4_0:
      for (size_t b = 0; b < n / kQuantBlock; ++b)
        quantize_q4_0(src.data() + b * kQuantBlock, static_cast<BlockQ4_0*>(dst) + b);
      return ok_status();
    case DType::kI32:
      break;
    default:
      quantize_blocks(src.data(), n, to, dst);
      return ok_status();
  }
  return invalid_argument(fmt::format("{} is not a floating-point storage type", dtype_name(to)));
}

Status dequantize(const void* src, DType from, std::span<float> dst) {
  TS_RETURN_IF_ERROR(check_count(from, dst.size()));
  const size_t n = dst.size();
  switch (from) {
    case DType::kF32:
      std::memcpy(dst.data(), src, n * 4);
      return ok_status();
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return ok_status();
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return ok_status();
    case DType::kQ8_0:
      for (size_t b = 0; b < n / kQuantBlock; ++b) {
        const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(src)[b];
        const float d = f16_to_f32(blk.d);
        for (int i = 0; i < kQuantBlock; ++i) dst[b * kQuantBlock + i] = d * static_cast<float>(blk.qs[i]);
      }
      return ok_status();
    case DType::kQ4_0:
      for (size_t b = 0; b < n / kQuantBlock; ++b) {
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(src)[b];
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          dst[b * kQuantBlock + j] = d * static_cast<float>((blk.qs[j] & 0x0f) - 8);
          dst[b * kQuantBlock + j + kQuantBlock / 2] = d * static_cast<float>((blk.qs[j] >> 4) - 8);
        }
      }
      return ok_status();
    case DType::kI32:
      break;
    default:
      dequantize_blocks(src, from, n, dst.data());
      return ok_status();
  }
  return invalid_argument(fmt::format("{} is not a floating-point storage type", dtype_name(from)));
}

}  // namespace tessera
