// Matrix products with GGUF block-quantised weights (q8_0, q4_0, q4_k, q6_k), appended to kernels.cl's
// program. The block layouts are base/quant.h's; each kernel widens one weight row block by block to f32
// exactly as base/quant's reference dequantisers do and multiplies it with the f32 activations, so the
// only difference from ops/ref is the order of the sums (activations are not quantised, unlike the cpu
// backend's integer kernels).
//
// Weights arrive as bytes: row i starts at w_off + i * row_bytes. Every block size (34, 18, 144, 210) is
// even and the host only accepts views at even byte offsets, so the f16 scales are 2-byte aligned for
// vload_half (core OpenCL 1.2, no cl_khr_fp16). One work-item per output (weight row i, activation row r).

inline float ld_f16(__global const uchar* p) { return vload_half(0, (__global const half*)p); }

// One weight row (`row`, k elements) dotted with k activations: each block widened exactly as base/quant's
// reference dequantisers do, summed in element order. The matmul kernels below and the mixture-of-experts kernels
// (kernels_moe.cl) share them.

// q8_0: d, int8 q[32]; x = d * q.
inline float dot_q8_0(__global const uchar* row, __global const float* xr, int k) {
  const int nb = k / 32;
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    __global const uchar* blk = row + b * 34;
    __global const char* q = (__global const char*)(blk + 2);
    const float d = ld_f16(blk);
    __global const float* xb = xr + b * 32;
    for (int j = 0; j < 32; ++j) s += (d * (float)q[j]) * xb[j];
  }
  return s;
}

// q4_0: d, nibbles[16]; byte j holds element j (low nibble) and j + 16 (high); x = d * (q - 8).
inline float dot_q4_0(__global const uchar* row, __global const float* xr, int k) {
  const int nb = k / 32;
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    __global const uchar* blk = row + b * 18;
    const float d = ld_f16(blk);
    __global const float* xb = xr + b * 32;
    for (int j = 0; j < 16; ++j) s += (d * (float)((int)(blk[2 + j] & 15) - 8)) * xb[j];
    for (int j = 0; j < 16; ++j) s += (d * (float)((int)(blk[2 + j] >> 4) - 8)) * xb[16 + j];
  }
  return s;
}

// q4_k: d, dmin, scales[12], qs[128]. Group j (32 elements) has a six-bit scale and min (unpack_k4_scale in
// base/quant.h); element e is in byte 32 * (e / 64) + e % 32 of qs, low nibble when e % 64 < 32;
// x = d * sc * q - dmin * m.
inline float dot_q4_k(__global const uchar* row, __global const float* xr, int k) {
  const int nb = k / 256;
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    __global const uchar* blk = row + b * 144;
    const float d = ld_f16(blk), dmin = ld_f16(blk + 2);
    __global const uchar* sc6 = blk + 4;
    __global const uchar* qs = blk + 16;
    __global const float* xb = xr + b * 256;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      if (j < 4) {
        sc = sc6[j] & 63;
        mn = sc6[j + 4] & 63;
      } else {
        sc = (sc6[j + 4] & 15) | ((sc6[j - 4] >> 6) << 4);
        mn = (sc6[j + 4] >> 4) | ((sc6[j] >> 6) << 4);
      }
      const float ds = d * (float)sc, dm = dmin * (float)mn;
      __global const uchar* q = qs + 32 * (j / 2);
      const int shift = (j & 1) ? 4 : 0;
      for (int l = 0; l < 32; ++l) s += (ds * (float)((q[l] >> shift) & 15) - dm) * xb[32 * j + l];
    }
  }
  return s;
}

// q6_k: ql[128], qh[64], int8 scales[16], d. In half h = e / 128, group g = e % 128 / 32, lane l = e % 32:
// low four bits from ql[64h + 32 (g & 1) + l] (high nibble when g >= 2), top two from qh[32h + l] >> 2g;
// x = d * scales[e / 16] * (q - 32).
inline float dot_q6_k(__global const uchar* row, __global const float* xr, int k) {
  const int nb = k / 256;
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    __global const uchar* ql = row + b * 210;
    __global const uchar* qh = ql + 128;
    __global const char* scales = (__global const char*)(ql + 192);
    const float d = ld_f16(ql + 208);
    __global const float* xb = xr + b * 256;
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, g = e % 128 / 32, l = e % 32;
      const uchar lo = ql[64 * h + 32 * (g & 1) + l];
      const int q = ((g >= 2 ? lo >> 4 : lo) & 15) | (((qh[32 * h + l] >> (2 * g)) & 3) << 4);
      s += (d * (float)scales[e / 16] * (float)(q - 32)) * xb[e];
    }
  }
  return s;
}

// Bytes of one row of k elements per type.
#define ROW_Q8_0(k) ((ulong)(k) / 32 * 34)
#define ROW_Q4_0(k) ((ulong)(k) / 32 * 18)
#define ROW_Q4_K(k) ((ulong)(k) / 256 * 144)
#define ROW_Q6_K(k) ((ulong)(k) / 256 * 210)

// out[r, i] = dot(w row i, x row r) (+ bias[i]).
#define QUANT_MATMUL(NAME, DOT, ROW)                                                                              \
  __kernel void NAME(__global const float* x, ulong x_off, __global const uchar* w, ulong w_off,                   \
                     __global float* out, ulong out_off, __global const float* bias, ulong bias_off, int has_bias, \
                     int k, int m) {                                                                              \
    const int i = get_global_id(0), r = get_global_id(1);                                                         \
    const float s = DOT(w + w_off + (ulong)i * ROW(k), x + x_off + (ulong)r * k, k);                             \
    out[out_off + (ulong)r * m + i] = has_bias ? s + bias[bias_off + i] : s;                                      \
  }
QUANT_MATMUL(matmul_q8_0, dot_q8_0, ROW_Q8_0)
QUANT_MATMUL(matmul_q4_0, dot_q4_0, ROW_Q4_0)
QUANT_MATMUL(matmul_q4_k, dot_q4_k, ROW_Q4_K)
QUANT_MATMUL(matmul_q6_k, dot_q6_k, ROW_Q6_K)
