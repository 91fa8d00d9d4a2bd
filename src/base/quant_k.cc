// Reference (de)quantisation of the block types beyond q8_0 / q4_0: the classic q4_1, q5_0, q5_1 and the
// K-quants q2_k, q3_k, q4_k, q5_k, q6_k. The layouts are documented in base/quant.h; dequantisation follows
// them element by element and is the oracle the ref backend and every fast kernel are checked against.
//
// The quantisers take each group's range (min/max, or the signed extreme for the symmetric types), quantise
// the group scales against the super-block's, then round every element with the scale it will be decoded
// with. That is a valid encoding with bounded error; llama-quantize searches for better scales, which is
// irrelevant to loading its files (the decoders read any valid block).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/quant.h"

namespace tessera {
namespace {

int nearest(float v) { return static_cast<int>(std::lround(v)); }
int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Minimum and maximum of n values.
void range(const float* x, int n, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int i = 1; i < n; ++i) {
    *lo = std::min(*lo, x[i]);
    *hi = std::max(*hi, x[i]);
  }
}
// The value of largest magnitude (its sign decides which end of an asymmetric range it gets).
float signed_extreme(const float* x, int n) {
  float best = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  }
  return best;
}

// ---- classic 32-element blocks -------------------------------------------------------------------------

void put_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
}
void put_fifth_bits(const int* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}
void get_q5(const uint8_t* qs, const uint8_t* qh4, int* q) {
  uint32_t h;
  std::memcpy(&h, qh4, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((h >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((h >> (j + 16)) & 1) << 4);
  }
}

// Affine block: x = d * q + m with q in [0, levels - 1].
void affine(const float* x, int levels, uint16_t* d16, uint16_t* m16, int* q) {
  float lo, hi;
  range(x, 32, &lo, &hi);
  const float d = (hi - lo) / static_cast<float>(levels - 1);
  *d16 = f32_to_f16(d);
  *m16 = f32_to_f16(lo);
  const float dd = f16_to_f32(*d16), mm = f16_to_f32(*m16);
  const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = clampi(nearest((x[i] - mm) * id), 0, levels - 1);
}

void quantize_q4_1(const float* x, BlockQ4_1* b) {
  int q[32];
  affine(x, 16, &b->d, &b->m, q);
  put_nibbles(q, b->qs);
}
void quantize_q5_1(const float* x, BlockQ5_1* b) {
  int q[32];
  affine(x, 32, &b->d, &b->m, q);
  put_nibbles(q, b->qs);
  put_fifth_bits(q, b->qh);
}
void quantize_q5_0(const float* x, BlockQ5_0* b) {
  const float d = signed_extreme(x, 32) / -16.0f;
  b->d = f32_to_f16(d);
  const float dd = f16_to_f32(b->d), id = dd != 0.0f ? 1.0f / dd : 0.0f;
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clampi(nearest(x[i] * id) + 16, 0, 31);
  put_nibbles(q, b->qs);
  put_fifth_bits(q, b->qh);
}

// ---- K-quants --------------------------------------------------------------------------------------------

// Groups of `g` elements with x = d * sc * q - dmin * m, sc and m in [0, smax], q in [0, levels - 1].
// Fills sc[], m[] and q[256]; returns d and dmin through the f16 pointers.
void affine_k(const float* x, int g, int levels, int smax, uint16_t* d16, uint16_t* dmin16, int* sc, int* m, int* q) {
  const int groups = kSuperBlock / g;
  float scale[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < groups; ++j) {
    float lo, hi;
    range(x + j * g, g, &lo, &hi);
    lo = std::min(lo, 0.0f);  // the min is subtracted: only non-positive offsets are representable
    scale[j] = (hi - lo) / static_cast<float>(levels - 1);
    mins[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mins[j]);
  }
  *d16 = f32_to_f16(max_scale / static_cast<float>(smax));
  *dmin16 = f32_to_f16(max_min / static_cast<float>(smax));
  const float d = f16_to_f32(*d16), dmin = f16_to_f32(*dmin16);
  for (int j = 0; j < groups; ++j) {
    sc[j] = d != 0.0f ? clampi(nearest(scale[j] / d), 0, smax) : 0;
    m[j] = dmin != 0.0f ? clampi(nearest(mins[j] / dmin), 0, smax) : 0;
    const float ds = d * static_cast<float>(sc[j]), off = dmin * static_cast<float>(m[j]);
    const float ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    for (int i = 0; i < g; ++i) q[j * g + i] = clampi(nearest((x[j * g + i] + off) * ids), 0, levels - 1);
  }
}

// Symmetric groups of 16: x = d * sc * (q - zero), sc in [smin, smax], q in [0, 2 * zero - 1].
void symmetric_k(const float* x, int zero, int smin, int smax, uint16_t* d16, int* sc, int* q) {
  float scale[16], max_abs = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scale[j] = signed_extreme(x + 16 * j, 16) / static_cast<float>(-zero);
    max_abs = std::max(max_abs, std::fabs(scale[j]));
  }
  *d16 = f32_to_f16(max_abs / static_cast<float>(-smin));
  const float d = f16_to_f32(*d16);
  for (int j = 0; j < 16; ++j) {
    sc[j] = d != 0.0f ? clampi(nearest(scale[j] / d), smin, smax) : 0;
    const float ds = d * static_cast<float>(sc[j]), ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    for (int i = 0; i < 16; ++i) q[16 * j + i] = clampi(nearest(x[16 * j + i] * ids) + zero, 0, 2 * zero - 1);
  }
}

void pack_k4_scales(const int* sc, const int* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}
// Two-bit fields of q2_k / q3_k: element e in byte 32 * (e / 128) + e % 32 at bit 2 * (e % 128 / 32).
void put_crumbs(const int* q, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int e = 0; e < kSuperBlock; ++e)
    qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((q[e] & 3) << (2 * (e % 128 / 32)));
}
int get_crumb(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }
// Four-bit fields of q4_k / q5_k: element e in byte 32 * (e / 64) + e % 32, high nibble when e % 64 >= 32.
void put_k4_nibbles(const int* q, uint8_t* qs) {
  std::memset(qs, 0, 128);
  for (int e = 0; e < kSuperBlock; ++e)
    qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>((q[e] & 15) << (e % 64 < 32 ? 0 : 4));
}
int get_k4_nibble(const uint8_t* qs, int e) {
  const uint8_t b = qs[32 * (e / 64) + e % 32];
  return e % 64 < 32 ? (b & 15) : (b >> 4);
}

void quantize_q2_k(const float* x, BlockQ2_K* b) {
  int sc[16], m[16], q[256];
  affine_k(x, 16, 4, 15, &b->d, &b->dmin, sc, m, q);
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
  put_crumbs(q, b->qs);
}
void quantize_q3_k(const float* x, BlockQ3_K* b) {
  int sc[16], q[256];
  symmetric_k(x, 4, -32, 31, &b->d, sc, q);
  std::memset(b->scales, 0, 12);
  for (int i = 0; i < 16; ++i) {
    const int v = sc[i] + 32;
    b->scales[i % 8] |= static_cast<uint8_t>((v & 15) << (i < 8 ? 0 : 4));
    b->scales[8 + i % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (i / 4)));
  }
  std::memset(b->hmask, 0, 32);
  for (int e = 0; e < kSuperBlock; ++e) {
    if (q[e] >= 4) b->hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
  }
  int low[256];
  for (int e = 0; e < kSuperBlock; ++e) low[e] = q[e] & 3;  // q - 4 = low - (high bit ? 0 : 4)
  put_crumbs(low, b->qs);
}
void quantize_q4_k(const float* x, BlockQ4_K* b) {
  int sc[8], m[8], q[256];
  affine_k(x, 32, 16, 63, &b->d, &b->dmin, sc, m, q);
  pack_k4_scales(sc, m, b->scales);
  put_k4_nibbles(q, b->qs);
}
void quantize_q5_k(const float* x, BlockQ5_K* b) {
  int sc[8], m[8], q[256];
  affine_k(x, 32, 32, 63, &b->d, &b->dmin, sc, m, q);
  pack_k4_scales(sc, m, b->scales);
  put_k4_nibbles(q, b->qs);
  std::memset(b->qh, 0, 32);
  for (int e = 0; e < kSuperBlock; ++e) b->qh[e % 32] |= static_cast<uint8_t>(((q[e] >> 4) & 1) << (e / 32));
}
void quantize_q6_k(const float* x, BlockQ6_K* b) {
  int sc[16], q[256];
  symmetric_k(x, 32, -128, 127, &b->d, sc, q);
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<int8_t>(sc[j]);
  std::memset(b->ql, 0, 128);
  std::memset(b->qh, 0, 64);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    b->ql[64 * h + 32 * (g & 1) + l] |= static_cast<uint8_t>((q[e] & 15) << (g >= 2 ? 4 : 0));
    b->qh[32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * g));
  }
}

// ---- decoders --------------------------------------------------------------------------------------------

void dequantize_q2_k(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int s = b.scales[e / 16];
    y[e] = d * static_cast<float>(s & 15) * static_cast<float>(get_crumb(b.qs, e)) - dmin * static_cast<float>(s >> 4);
  }
}
void dequantize_q3_k(const BlockQ3_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  int sc[16];
  unpack_q3_k_scales(b.scales, sc);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int q = get_crumb(b.qs, e) - ((b.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
    y[e] = d * static_cast<float>(sc[e / 16] - 32) * static_cast<float>(q);
  }
}
template <typename B>
void dequantize_k4(const B& b, const uint8_t* qh, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    unpack_k4_scale(b.scales, j, &sc, &m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      const int e = 32 * j + i;
      const int q = get_k4_nibble(b.qs, e) + (qh ? ((qh[i] >> j) & 1) << 4 : 0);
      y[e] = ds * static_cast<float>(q) - dm;
    }
  }
}
void dequantize_q6_k(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    const uint8_t lo = b.ql[64 * h + 32 * (g & 1) + l];
    const int q = ((g >= 2 ? lo >> 4 : lo) & 15) | (((b.qh[32 * h + l] >> (2 * g)) & 3) << 4);
    y[e] = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(q - 32);
  }
}

template <typename B, typename F>
void each_block(const void* src, size_t n, float* dst, int elems, F f) {
  for (size_t i = 0; i < n / static_cast<size_t>(elems); ++i) f(static_cast<const B*>(src)[i], dst + i * elems);
}
template <typename B, typename F>
void each_block_out(const float* x, size_t n, void* dst, int elems, F f) {
  for (size_t i = 0; i < n / static_cast<size_t>(elems); ++i) f(x + i * elems, static_cast<B*>(dst) + i);
}

}  // namespace

// llama.cpp's reference quantiser (quantize_row_mxfp4_ref): the scale from the block's largest magnitude, each
// value the nearest code (the first of equals).
void quantize_mxfp4(const float* x, BlockMXFP4* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const auto e = static_cast<uint8_t>(amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0);
  const float d = e8m0_half(e);
  b->e = e;
  auto best = [d](float v) {
    int idx = 0;
    float err = std::fabs(kMxfp4Values[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float e2 = std::fabs(kMxfp4Values[i] * d - v);
      if (e2 < err) {
        idx = i;
        err = e2;
      }
    }
    return static_cast<uint8_t>(idx);
  };
  for (int j = 0; j < 16; ++j) b->qs[j] = static_cast<uint8_t>(best(x[j]) | (best(x[j + 16]) << 4));
}

void quantize_blocks(const float* x, size_t n, DType to, void* dst) {
  switch (to) {
    case DType::kMXFP4:
      return each_block_out<BlockMXFP4>(x, n, dst, 32, quantize_mxfp4);
    case DType::kQ4_1:
      return each_block_out<BlockQ4_1>(x, n, dst, 32, quantize_q4_1);
    case DType::kQ5_0:
      return each_block_out<BlockQ5_0>(x, n, dst, 32, quantize_q5_0);
    case DType::kQ5_1:
      return each_block_out<BlockQ5_1>(x, n, dst, 32, quantize_q5_1);
    case DType::kQ2_K:
      return each_block_out<BlockQ2_K>(x, n, dst, 256, quantize_q2_k);
    case DType::kQ3_K:
      return each_block_out<BlockQ3_K>(x, n, dst, 256, quantize_q3_k);
    case DType::kQ4_K:
      return each_block_out<BlockQ4_K>(x, n, dst, 256, quantize_q4_k);
    case DType::kQ5_K:
      return each_block_out<BlockQ5_K>(x, n, dst, 256, quantize_q5_k);
    case DType::kQ6_K:
      return each_block_out<BlockQ6_K>(x, n, dst, 256, quantize_q6_k);
    default:
      TS_CHECK(false && "quantize_blocks: not a block type of quant_k.cc");
  }
}

void dequantize_blocks(const void* src, DType from, size_t n, float* dst) {
  switch (from) {
    case DType::kMXFP4:
      return each_block<BlockMXFP4>(src, n, dst, 32, [](const BlockMXFP4& b, float* y) {
        const float d = e8m0_half(b.e);
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>(kMxfp4Values[b.qs[j] & 15]) * d;
          y[j + 16] = static_cast<float>(kMxfp4Values[b.qs[j] >> 4]) * d;
        }
      });
    case DType::kQ4_1:
      return each_block<BlockQ4_1>(src, n, dst, 32, [](const BlockQ4_1& b, float* y) {
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>(b.qs[j] & 15) * d + m;
          y[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
        }
      });
    case DType::kQ5_0:
      return each_block<BlockQ5_0>(src, n, dst, 32, [](const BlockQ5_0& b, float* y) {
        const float d = f16_to_f32(b.d);
        int q[32];
        get_q5(b.qs, b.qh, q);
        for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i] - 16) * d;
      });
    case DType::kQ5_1:
      return each_block<BlockQ5_1>(src, n, dst, 32, [](const BlockQ5_1& b, float* y) {
        const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
        int q[32];
        get_q5(b.qs, b.qh, q);
        for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(q[i]) * d + m;
      });
    case DType::kQ2_K:
      return each_block<BlockQ2_K>(src, n, dst, 256, dequantize_q2_k);
    case DType::kQ3_K:
      return each_block<BlockQ3_K>(src, n, dst, 256, dequantize_q3_k);
    case DType::kQ4_K:
      return each_block<BlockQ4_K>(src, n, dst, 256,
                                   [](const BlockQ4_K& b, float* y) { dequantize_k4(b, nullptr, y); });
    case DType::kQ5_K:
      return each_block<BlockQ5_K>(src, n, dst, 256, [](const BlockQ5_K& b, float* y) { dequantize_k4(b, b.qh, y); });
    case DType::kQ6_K:
      return each_block<BlockQ6_K>(src, n, dst, 256, dequantize_q6_k);
    default:
      TS_CHECK(false && "dequantize_blocks: not a block type of quant_k.cc");
  }
}

}  // namespace tessera
