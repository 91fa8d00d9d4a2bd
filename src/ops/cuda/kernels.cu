// CUDA kernels for Tessera's operators: straightforward first versions of each (one thread per output
// element or row; matrix products one warp per output with shuffle reduction), numerically following the
// reference (sequential row reductions, max-subtracted softmax, correctly rounded division and sqrt; layer_norm
// sums a row in double over a block). The per-element and per-row arithmetic of the activations, routing, the
// causal convolution and the gated delta rule lives in kernel_math.h, which host tests run against ref.
// Stored weight types are widened element by element by dq() as base/quant's dequantize() does, with the
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fsub_rn) so that nvcc cannot fuse them into FMAs: a
// looked-up embedding row is then bit-identical to ref's.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include "ops/cuda/kernel_math.h"
#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ void flag(int* err) { atomicCAS(err, 0, 1); }

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
int last_error() { return static_cast<int>(cudaGetLastError()); }

// DType enumerator values (base/dtype.h).
enum : int {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_1 = 6,
  kQ5_0 = 7,
  kQ5_1 = 8,
  kQ2_K = 9,
  kQ3_K = 10,
  kQ4_K = 11,
  kQ5_K = 12,
  kQ6_K = 13,
  kMXFP4 = 14
};

// Round-to-nearest arithmetic that is never fused into an FMA: the intrinsics on the device, plain operations
// on the host (where dq also runs, for cuda_dequantize_row; x86-64 code here has no FMA contraction).
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float half_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}
__device__ __forceinline__ float bits_float(uint32_t u) { return __uint_as_float(u); }
#else
inline float mul(float a, float b) { return a * b; }
inline float add(float a, float b) { return a + b; }
inline float sub(float a, float b) { return a - b; }
inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline float half_bits(uint32_t h) {  // IEEE half to float, exact (as base/quant.cc's f16_to_f32)
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}
#endif

__host__ __device__ __forceinline__ float f16at(const uint8_t* p) { return half_bits(p[0] | (p[1] << 8)); }
__host__ __device__ __forceinline__ uint32_t u32at(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
// Element j (0..31) of a classic block's nibbles at qs: byte j low nibble, or byte j - 16 high nibble.
__host__ __device__ __forceinline__ int nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
}

// Element e of a row of type `type` starting at `row` (base/quant.h's layouts).
__host__ __device__ float dq(int type, const uint8_t* row, int64_t e) {
  switch (type) {
    case kF32: {
      float v;
      memcpy(&v, row + 4 * e, 4);
      return v;
    }
    case kF16:
      return f16at(row + 2 * e);
    case kBF16:
      return bits_float(static_cast<uint32_t>(row[2 * e] | (row[2 * e + 1] << 8)) << 16);
    case kQ8_0: {
      const uint8_t* b = row + (e / 32) * 34;
      return mul(f16at(b), static_cast<float>(static_cast<int8_t>(b[2 + e % 32])));
    }
    case kQ4_0: {
      const uint8_t* b = row + (e / 32) * 18;
      return mul(f16at(b), static_cast<float>(nibble(b + 2, e % 32) - 8));
    }
    case kMXFP4: {  // E8M0 exponent, then E2M1 codes (doubled, as ggml) in q4_0's nibble order
      const uint8_t* b = row + (e / 32) * 17;
      const int codes[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
      const uint32_t x = b[0];
      const float d = bits_float(x < 2 ? 0x00200000u << x : (x - 1) << 23);
      return mul(static_cast<float>(codes[nibble(b + 1, static_cast<int>(e % 32))]), d);
    }
    case kQ4_1: {
      const uint8_t* b = row + (e / 32) * 20;
      return add(mul(static_cast<float>(nibble(b + 4, e % 32)), f16at(b)), f16at(b + 2));
    }
    case kQ5_0:
    case kQ5_1: {
      const bool one = type == kQ5_1;
      const uint8_t* b = row + (e / 32) * (one ? 24 : 22);
      const int j = static_cast<int>(e % 32);
      const int q = nibble(b + (one ? 8 : 6), j) | static_cast<int>(((u32at(b + (one ? 4 : 2)) >> j) & 1) << 4);
      if (one) return add(mul(static_cast<float>(q), f16at(b)), f16at(b + 2));
      return mul(static_cast<float>(q - 16), f16at(b));
    }
    case kQ2_K: {
      const uint8_t* b = row + (e / 256) * 84;
      const int E = static_cast<int>(e % 256), sc = b[E / 16];
      const int q = (b[16 + 32 * (E / 128) + E % 32] >> (2 * (E % 128 / 32))) & 3;
      return sub(mul(mul(f16at(b + 80), static_cast<float>(sc & 15)), static_cast<float>(q)),
                 mul(f16at(b + 82), static_cast<float>(sc >> 4)));
    }
    case kQ3_K: {
      const uint8_t* b = row + (e / 256) * 110;
      const int E = static_cast<int>(e % 256), i = E / 16;
      const int low = i < 8 ? (b[96 + i] & 15) : (b[88 + i] >> 4);
      const int sc = low | (((b[104 + i % 4] >> (2 * (i / 4))) & 3) << 4);
      const int crumb = (b[32 + 32 * (E / 128) + E % 32] >> (2 * (E % 128 / 32))) & 3;
      const int q = crumb - (((b[E % 32] >> (E / 32)) & 1) ? 0 : 4);
      return mul(mul(f16at(b + 108), static_cast<float>(sc - 32)), static_cast<float>(q));
    }
    case kQ4_K:
    case kQ5_K: {
      const bool five = type == kQ5_K;
      const uint8_t* b = row + (e / 256) * (five ? 176 : 144);
      const int E = static_cast<int>(e % 256), j = E / 32;
      const uint8_t* s6 = b + 4;
      int sc, mn;
      if (j < 4) {
        sc = s6[j] & 63;
        mn = s6[j + 4] & 63;
      } else {
        sc = (s6[j + 4] & 15) | ((s6[j - 4] >> 6) << 4);
        mn = (s6[j + 4] >> 4) | ((s6[j] >> 6) << 4);
      }
      const float ds = mul(f16at(b), static_cast<float>(sc)), dm = mul(f16at(b + 2), static_cast<float>(mn));
      const uint8_t qb = b[(five ? 48 : 16) + 32 * (E / 64) + E % 32];
      int q = E % 64 < 32 ? (qb & 15) : (qb >> 4);
      if (five) q += ((b[16 + E % 32] >> j) & 1) << 4;
      return sub(mul(ds, static_cast<float>(q)), dm);
    }
    case kQ6_K: {
      const uint8_t* b = row + (e / 256) * 210;
      const int E = static_cast<int>(e % 256), h = E / 128, g = E % 128 / 32, l = E % 32;
      const uint8_t lo = b[64 * h + 32 * (g & 1) + l];
      const int q = ((g >= 2 ? lo >> 4 : lo) & 15) | (((b[128 + 32 * h + l] >> (2 * g)) & 3) << 4);
      const int sc = static_cast<int8_t>(b[192 + E / 16]);
      return mul(mul(f16at(b + 208), static_cast<float>(sc)), static_cast<float>(q - 32));
    }
    default:
      return 0.0f;  // the host refuses other types (capability)
  }
}

__global__ void embedding_k(const uint8_t* table, int type, int64_t row_bytes, const int32_t* ids, float* out, int n,
                            int dim, int vocab, float scale, int* err) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * dim) return;
  const int i = static_cast<int>(idx / dim), j = static_cast<int>(idx % dim);
  const int id = ids[i];
  if (id < 0 || id >= vocab) {
    flag(err);
    return;
  }
  const float v = dq(type, table + static_cast<int64_t>(id) * row_bytes, j);
  out[idx] = scale == 1.0f ? v : __fmul_rn(v, scale);
}

__device__ void rms_row(const float* x, const float* w, float* out, int n, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / sqrtf(ss);
  for (int j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

__global__ void rms_norm_k(const float* x, const float* w, float* out, int rows, int n, float eps) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) rms_row(x + static_cast<int64_t>(r) * n, w, out + static_cast<int64_t>(r) * n, n, eps);
}

__global__ void add_rms_norm_k(float* res, const float* d, const float* w, float* out, int rows, int n, float eps) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float* x = res + static_cast<int64_t>(r) * n;
  for (int j = 0; j < n; ++j) x[j] += d[static_cast<int64_t>(r) * n + j];
  rms_row(x, w, out + static_cast<int64_t>(r) * n, n, eps);
}

// Turns the first `rot` elements of each head (rot == hd: all of them); pair j by pos * theta^(-2j/rot).
__global__ void rope_k(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, int rot,
                       float theta, bool interleaved, const float* freqs, float mscale) {
  const int half = rot / 2;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n * half) return;
  const int t = idx / half, j = idx % half;
  const float freq = freqs ? freqs[j] : 1.0f / powf(theta, static_cast<float>(2 * j) / static_cast<float>(rot));
  const float angle = __fmul_rn(static_cast<float>(pos[t]), freq);
  float c = cosf(angle), s = sinf(angle);
  if (freqs) {
    c = __fmul_rn(c, mscale);
    s = __fmul_rn(s, mscale);
  }
  const int a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + half;
  for (int h = 0; h < q_heads; ++h) {
    float* x = q + (static_cast<int64_t>(t) * q_heads + h) * hd;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
  for (int h = 0; h < k_heads; ++h) {
    float* x = k + (static_cast<int64_t>(t) * k_heads + h) * hd;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

__device__ float load(const float* p, int64_t i) { return p[i]; }
__device__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
// The other KV cache types as element types of the templates below (kernel_math.h converts).
struct Bf16Elem {
  uint16_t v;
};
struct Q8Byte {  // a q8_0 cache, addressed by element; its bytes are blocks of 34
  uint8_t b;
};
struct Q4Byte {  // a q4_0 cache, blocks of 18
  uint8_t b;
};
__device__ float load(const Bf16Elem* p, int64_t i) { return from_bf16(p[i].v); }
__device__ void store(Bf16Elem* p, int64_t i, float v) { p[i].v = to_bf16(v); }
__device__ float load(const Q8Byte* p, int64_t i) { return block_elem(reinterpret_cast<const uint8_t*>(p), i, true); }
__device__ float load(const Q4Byte* p, int64_t i) { return block_elem(reinterpret_cast<const uint8_t*>(p), i, false); }

// Block caches: one thread per (token, block of 32) quantises its K and V block into the slot's row.
__global__ void kv_write_block_k(const float* k, const float* v, uint8_t* kc, uint8_t* vc, const int32_t* slots, int n,
                                 int row, int capacity, bool q8, int* err) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int per_row = row / 32;
  if (idx >= static_cast<int64_t>(n) * per_row) return;
  const int t = static_cast<int>(idx / per_row), b = static_cast<int>(idx % per_row);
  const int slot = slots[t];
  if (slot < 0 || slot >= capacity) {
    flag(err);
    return;
  }
  const int64_t bb = q8 ? 34 : 18, src = static_cast<int64_t>(t) * row + b * 32;
  const int64_t dst = (static_cast<int64_t>(slot) * per_row + b) * bb;
  if (q8) {
    quantize_block_q8_0(k + src, kc + dst);
    quantize_block_q8_0(v + src, vc + dst);
  } else {
    quantize_block_q4_0(k + src, kc + dst);
    quantize_block_q4_0(v + src, vc + dst);
  }
}

template <typename T>
__global__ void kv_write_k(const float* k, const float* v, T* kc, T* vc, const int32_t* slots, int n, int row,
                           int capacity, int* err) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * row) return;
  const int t = static_cast<int>(idx / row), i = static_cast<int>(idx % row);
  const int slot = slots[t];
  if (slot < 0 || slot >= capacity) {
    flag(err);
    return;
  }
  store(kc, static_cast<int64_t>(slot) * row + i, k[idx]);
  store(vc, static_cast<int64_t>(slot) * row + i, v[idx]);
}

// One warp per (token, head): the lanes take every 32nd visible position for the scores (each its own key row),
// reduce the maximum and the sum across the warp, then take every 32nd element of the head for the weighted sum of
// the values (coalesced rows). One thread per (token, head) had decode read a long context serially: on an H200 a
// 4-layer llama3.2-1b shape decoded 26 tok/s at depth 576 (scripts/gpu-check.sh, 2026-12-04).
template <typename T>
__global__ void attention_k(const float* q, const T* kc, const T* vc, const int32_t* tables, int stride,
                            const int32_t* lens, int start_pos, float* out, float* scores_all, int max_ctx, int count,
                            int heads, int kv_heads, int hd, int block_tokens, int num_blocks, float scale,
                            float softcap, int window, const float* sinks, int* err) {
  constexpr unsigned kAll = 0xffffffffu;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp >= static_cast<int64_t>(count) * heads) return;  // whole warps: blockDim is a multiple of 32
  const int idx = static_cast<int>(warp);
  const int i = idx / heads, h = idx % heads;
  const int pos = lens ? lens[i] - 1 : start_pos + i;
  const int32_t* table = tables + (lens ? static_cast<int64_t>(i) * stride : 0);
  const int need = pos / block_tokens + 1;
  if (pos < 0 || pos >= max_ctx || need > stride) {
    if (lane == 0) flag(err);
    return;
  }
  bool bad = false;
  for (int b = lane; b < need; b += 32) bad = bad || table[b] < 0 || table[b] >= num_blocks;
  if (__any_sync(kAll, bad)) {
    if (lane == 0) flag(err);
    return;
  }
  const int kvh = h / (heads / kv_heads);
  const float* qh = q + static_cast<int64_t>(idx) * hd;
  float* oh = out + static_cast<int64_t>(idx) * hd;
  float* scores = scores_all + static_cast<int64_t>(idx) * max_ctx;
  const float denom = sqrtf(static_cast<float>(hd));
  // A sliding window starts the visible positions later; those before `first` are never read.
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  float max_score = -INFINITY;
  for (int t = first + lane; t <= pos; t += 32) {
    const int64_t row =
        ((static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens) * kv_heads + kvh) * hd;
    float s = 0.0f;
    for (int e = 0; e < hd; ++e) s += qh[e] * load(kc, row + e);
    s = scale > 0.0f ? s * scale : s / denom;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    scores[t] = s;
    max_score = s > max_score ? s : max_score;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(kAll, max_score, off);
    max_score = o > max_score ? o : max_score;
  }
  // A sink is one more logit in the softmax that reads no value (ops.h): it raises the maximum and the sum.
  if (sinks) max_score = max_of(max_score, sinks[h]);
  float sum = 0.0f;
  for (int t = first + lane; t <= pos; t += 32) {
    scores[t] = expf(scores[t] - max_score);
    sum += scores[t];
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(kAll, sum, off);
  if (sinks) sum += expf(sinks[h] - max_score);
  for (int t = first + lane; t <= pos; t += 32) scores[t] /= sum;
  __syncwarp();  // every lane's scores written before any lane reads them all
  for (int e = lane; e < hd; e += 32) {
    float acc = 0.0f;
    for (int t = first; t <= pos; ++t) {
      const int64_t row =
          ((static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens) * kv_heads + kvh) * hd;
      acc += scores[t] * load(vc, row + e);
    }
    oh[e] = acc;
  }
}

// One warp per output: lanes stride over k, widening the weights as they go, then a shuffle reduction.
__global__ void matmul_k(const float* x, const uint8_t* w, int type, int64_t row_bytes, const float* bias, float* out,
                         int n, int k, int m) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(n) * m) return;
  const int r = static_cast<int>(warp / m), i = static_cast<int>(warp % m);
  const float* xr = x + static_cast<int64_t>(r) * k;
  const uint8_t* wi = w + static_cast<int64_t>(i) * row_bytes;
  float s = 0.0f;
  for (int j = lane; j < k; j += 32) s += dq(type, wi, j) * xr[j];
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) out[warp] = bias ? s + bias[i] : s;
}

// per > 1: one gate value per row of `per` up values (the sigmoid gate's [n, 1] form).
__global__ void silu_mul_k(const float* g, const float* u, float* out, int64_t n, int act, int64_t per) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = gated_value(act, g[per == 1 ? i : i / per], u[i], 0.0f, 0.0f);
}

__global__ void add_k(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void softmax_k(const float* x, float* out, int rows, int m) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + static_cast<int64_t>(r) * m;
  float* o = out + static_cast<int64_t>(r) * m;
  float mx = -INFINITY;
  for (int i = 0; i < m; ++i) mx = xr[i] > mx ? xr[i] : mx;
  float sum = 0.0f;
  for (int i = 0; i < m; ++i) {
    o[i] = expf(xr[i] - mx);
    sum += o[i];
  }
  for (int i = 0; i < m; ++i) o[i] /= sum;
}

__global__ void argmax_k(const float* x, int32_t* out, int rows, int m) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + static_cast<int64_t>(r) * m;
  int best = 0;
  for (int i = 1; i < m; ++i) {
    if (xr[i] > xr[best]) best = i;
  }
  out[r] = best;
}

__global__ void scale_k(const float* x, float* out, int64_t n, float scale) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __fmul_rn(x[i], scale);
}

__global__ void activation_k(const float* x, float* out, int64_t n, int act) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = activation_value(act, x[i]);
}

// The sum of v over the block (a multiple of 32 threads, at most 1024), returned to every thread: warp shuffles,
// then one warp over the warps' sums. The leading barrier lets a block call it twice in a row.
__device__ double block_sum(double v) {
  __shared__ double part[32];
  __shared__ double total;
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : 0.0;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// One block per row. The mean and the variance are summed in double, as ref does (in a tree rather than in row
// order); out may be x: every element is written after the second sum, which every thread's reads precede.
__global__ void layer_norm_k(const float* x, const float* w, const float* b, float* out, int n, float eps) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* o = out + static_cast<int64_t>(blockIdx.x) * n;
  double s = 0.0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
  const double mean = block_sum(s) / static_cast<double>(n);
  double q = 0.0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) q += (xr[j] - mean) * (xr[j] - mean);
  const double inv = 1.0 / sqrt(block_sum(q) / static_cast<double>(n) + static_cast<double>(eps));
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    o[j] = static_cast<float>((xr[j] - mean) * inv) * w[j] + (b ? b[j] : 0.0f);
}

// One thread per column: the mean sums the rows in order in double, as ref.
__global__ void pool_k(const float* x, float* out, int n, int dim, int kind) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  if (kind != kPoolMean) {
    out[j] = x[static_cast<int64_t>(kind == kPoolFirst ? 0 : n - 1) * dim + j];
    return;
  }
  double sum = 0.0;
  for (int r = 0; r < n; ++r) sum += x[static_cast<int64_t>(r) * dim + j];
  out[j] = static_cast<float>(sum / static_cast<double>(n));
}

// One thread per (query, head) over all n keys: three passes over the keys (the maximum score, the softmax's sum,
// then the weighted values) recompute each score rather than keep n of them, so the operator needs no scratch
// memory however long the input; each pass evaluates a score with the same operations, so it is the same value.
__global__ void attention_noncausal_k(const float* q, const float* k, const float* v, float* out, int n, int heads,
                                      int kv_heads, int hd, float scale) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n * heads) return;
  const int h = idx % heads, kvh = h / (heads / kv_heads);
  const float* qh = q + static_cast<int64_t>(idx) * hd;
  const float sc = scale > 0.0f ? scale : 1.0f / sqrtf(static_cast<float>(hd));
  auto score = [&](int t) {
    const float* kt = k + (static_cast<int64_t>(t) * kv_heads + kvh) * hd;
    float s = 0.0f;
    for (int e = 0; e < hd; ++e) s += qh[e] * kt[e];
    return s * sc;
  };
  float mx = -INFINITY;
  for (int t = 0; t < n; ++t) {
    const float s = score(t);
    if (s > mx) mx = s;
  }
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) sum += expf(score(t) - mx);
  float* oh = out + static_cast<int64_t>(idx) * hd;  // ops.h lets out alias no input: qh is read above
  for (int e = 0; e < hd; ++e) oh[e] = 0.0f;
  for (int t = 0; t < n; ++t) {
    const float p = expf(score(t) - mx) / sum;
    const float* vt = v + (static_cast<int64_t>(t) * kv_heads + kvh) * hd;
    for (int e = 0; e < hd; ++e) oh[e] += p * vt[e];
  }
}

__global__ void split_heads_k(const float* x, float* a, float* b, int64_t rows, int d) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= rows * d) return;
  const int64_t r = idx / d, e = idx % d;
  a[idx] = x[r * 2 * d + e];
  b[idx] = x[r * 2 * d + d + e];
}

// One thread per channel, over all the tokens (kernel_math.h's conv_channel).
__global__ void causal_conv1d_k(const float* x, const float* weight, float* state, float* out, int n, int channels,
                                int taps, bool reset) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < channels) conv_channel(x, weight, state, out, n, channels, taps, reset, c);
}

// One thread per (value head, value element): the element's row of the head's state (kernel_math.h's
// delta_rule_row). Threads share nothing, so there is no barrier between tokens.
__global__ void gated_delta_rule_k(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                                   const float* a, float* state, float* out, int n, int hv, int hk, int s, float eps,
                                   bool reset) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(hv) * s) return;
  const int h = static_cast<int>(idx / s), j = static_cast<int>(idx % s);
  delta_rule_row(qkv, alpha, beta, dt_bias, a, state + idx * s, out, n, hv, hk, s, eps, reset, h, j);
}

// One thread per row (kernel_math.h's route_row): a few hundred operations each.
__global__ void moe_route_k(const float* logits, const float* bias, const float* expert_scale, int32_t* ids, float* w,
                            int n, int experts, int k, int gating, bool normalize, float scale) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  route_row(logits + static_cast<int64_t>(r) * experts, experts, bias, k, gating, normalize, scale, expert_scale,
            ids + static_cast<int64_t>(r) * k, w + static_cast<int64_t>(r) * k);
}

// The sum of v over a warp, in every lane.
__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// MoeExpertsOp, part 1: for rows [row0, row0 + rows), h[(t - row0) * k + j][i] = act(gate[e] row i . x[t] +
// gate_bias[e][i], up[e] row i . x[t] + up_bias[e][i]), e = ids[t][j]: one warp per (row, slot, hidden unit),
// lanes striding over dim and widening both rows as matmul_k does. An expert id outside [0, experts) raises the
// stream's error flag and gives 0.
__global__ void moe_gate_up_k(MoeExpertsArgs p, int row0, int rows) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(rows) * p.k * p.ff) return;
  const int64_t tk = warp / p.ff;
  const int i = static_cast<int>(warp % p.ff);
  const int e = p.ids[static_cast<int64_t>(row0) * p.k + tk];
  float* h = p.h + tk * p.ff;
  if (e < 0 || e >= p.experts) {
    if (lane == 0) {
      flag(p.err);
      h[i] = 0.0f;
    }
    return;
  }
  const float* x = p.x + (row0 + tk / p.k) * p.dim;
  const uint8_t* g = p.gate + e * p.expert_bytes + i * p.row_bytes;
  const uint8_t* u = p.up + e * p.expert_bytes + i * p.row_bytes;
  float gs = 0.0f, us = 0.0f;
  for (int c = lane; c < p.dim; c += 32) {
    gs += dq(p.gate_type, g, c) * x[c];
    us += dq(p.gate_type, u, c) * x[c];
  }
  gs = warp_sum(gs);
  us = warp_sum(us);
  if (lane != 0) return;
  if (p.gate_bias) gs += p.gate_bias[static_cast<int64_t>(e) * p.ff + i];
  if (p.up_bias) us += p.up_bias[static_cast<int64_t>(e) * p.ff + i];
  h[i] = gated_value(p.act, gs, us, p.alpha, p.limit);
}

// Part 2: out[t][i] = sum over slots j = 0 .. k-1, in order, of weights[t][j] * (down[e] row i . h[t, j] +
// down_bias[e][i]) (the first product assigned, as ref): one warp per (row, output). An invalid expert raises the
// error flag and contributes 0. out may be x: part 1 read these rows of x before this launch.
__global__ void moe_down_k(MoeExpertsArgs p, int row0, int rows) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(rows) * p.dim) return;
  const int64_t t = warp / p.dim;
  const int i = static_cast<int>(warp % p.dim);
  float acc = 0.0f;
  for (int j = 0; j < p.k; ++j) {
    const int64_t slot = (row0 + t) * p.k + j;
    const int e = p.ids[slot];
    float y = 0.0f;
    if ((e < 0 || e >= p.experts) && lane == 0) flag(p.err);  // part 1 did too, unless ff is 0
    if (e >= 0 && e < p.experts) {  // the same in every lane: the shuffles below see the whole warp
      const uint8_t* d = p.down + e * p.down_expert_bytes + i * p.down_row_bytes;
      const float* h = p.h + (t * p.k + j) * p.ff;
      for (int c = lane; c < p.ff; c += 32) y += dq(p.down_type, d, c) * h[c];
      y = warp_sum(y);
      if (p.down_bias) y += p.down_bias[static_cast<int64_t>(e) * p.dim + i];
    }
    const float w = p.weights[slot];
    acc = j == 0 ? y * w : acc + y * w;
  }
  if (lane == 0) p.out[(row0 + t) * p.dim + i] = acc;
}

}  // namespace

void cuda_dequantize_row(int dtype, const uint8_t* row, int64_t k, float* out) {
  for (int64_t e = 0; e < k; ++e) out[e] = dq(dtype, row, e);
}

int launch_embedding(const uint8_t* table, int dtype, int64_t row_bytes, const int32_t* ids, float* out, int n, int dim,
                     int vocab, float scale, int* err, void* stream) {
  embedding_k<<<blocks_for(static_cast<int64_t>(n) * dim), kThreads, 0, st(stream)>>>(table, dtype, row_bytes, ids, out,
                                                                                      n, dim, vocab, scale, err);
  return last_error();
}
int launch_rms_norm(const float* x, const float* w, float* out, int rows, int n, float eps, void* stream) {
  rms_norm_k<<<blocks_for(rows), kThreads, 0, st(stream)>>>(x, w, out, rows, n, eps);
  return last_error();
}
int launch_add_rms_norm(float* res, const float* delta, const float* w, float* out, int rows, int n, float eps,
                        void* stream) {
  add_rms_norm_k<<<blocks_for(rows), kThreads, 0, st(stream)>>>(res, delta, w, out, rows, n, eps);
  return last_error();
}
int launch_rope(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, int rot, float theta,
                bool interleaved, const float* freqs, float mscale, void* stream) {
  rope_k<<<blocks_for(static_cast<int64_t>(n) * (rot / 2)), kThreads, 0, st(stream)>>>(
      q, k, pos, n, q_heads, k_heads, hd, rot, theta, interleaved, freqs, mscale);
  return last_error();
}
int launch_kv_write(const float* k, const float* v, void* kc, void* vc, int ctype, const int32_t* slots, int n, int row,
                    int capacity, int* err, void* stream) {
  if (ctype == kCacheQ8_0 || ctype == kCacheQ4_0) {
    kv_write_block_k<<<blocks_for(static_cast<int64_t>(n) * (row / 32)), kThreads, 0, st(stream)>>>(
        k, v, static_cast<uint8_t*>(kc), static_cast<uint8_t*>(vc), slots, n, row, capacity, ctype == kCacheQ8_0, err);
    return last_error();
  }
  const int b = blocks_for(static_cast<int64_t>(n) * row);
  if (ctype == kCacheBf16) {
    kv_write_k<Bf16Elem><<<b, kThreads, 0, st(stream)>>>(k, v, static_cast<Bf16Elem*>(kc), static_cast<Bf16Elem*>(vc),
                                                         slots, n, row, capacity, err);
  } else if (ctype == kCacheF16) {
    kv_write_k<__half><<<b, kThreads, 0, st(stream)>>>(k, v, static_cast<__half*>(kc), static_cast<__half*>(vc), slots,
                                                       n, row, capacity, err);
  } else {
    kv_write_k<float><<<b, kThreads, 0, st(stream)>>>(k, v, static_cast<float*>(kc), static_cast<float*>(vc), slots, n,
                                                      row, capacity, err);
  }
  return last_error();
}
template <typename T>
void attention_as(const float* q, const void* kc, const void* vc, const int32_t* tables, int stride,
                  const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                  int kv_heads, int hd, int block_tokens, int num_blocks, float scale, float softcap, int window,
                  const float* sinks, int* err, void* stream) {
  const int b = blocks_for(static_cast<int64_t>(count) * heads * 32);  // a warp per (token, head)
  attention_k<T><<<b, kThreads, 0, st(stream)>>>(q, static_cast<const T*>(kc), static_cast<const T*>(vc), tables,
                                                 stride, lens, start_pos, out, scores, max_ctx, count, heads, kv_heads,
                                                 hd, block_tokens, num_blocks, scale, softcap, window, sinks, err);
}
int launch_attention(const float* q, const void* kc, const void* vc, int ctype, const int32_t* tables, int stride,
                     const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                     int kv_heads, int hd, int block_tokens, int num_blocks, float scale, float softcap, int window,
                     const float* sinks, int* err, void* stream) {
  auto run = [&](auto tag) {
    attention_as<decltype(tag)>(q, kc, vc, tables, stride, lens, start_pos, out, scores, max_ctx, count, heads,
                                kv_heads, hd, block_tokens, num_blocks, scale, softcap, window, sinks, err, stream);
  };
  switch (ctype) {
    case kCacheF16:
      run(__half{});
      break;
    case kCacheBf16:
      run(Bf16Elem{});
      break;
    case kCacheQ8_0:
      run(Q8Byte{});
      break;
    case kCacheQ4_0:
      run(Q4Byte{});
      break;
    default:
      run(float{});
  }
  return last_error();
}
int launch_matmul(const float* x, const uint8_t* w, int dtype, int64_t row_bytes, const float* bias, float* out, int n,
                  int k, int m, void* stream) {
  const int b = blocks_for(static_cast<int64_t>(n) * m * 32);
  matmul_k<<<b, kThreads, 0, st(stream)>>>(x, w, dtype, row_bytes, bias, out, n, k, m);
  return last_error();
}
int launch_silu_mul(const float* g, const float* u, float* out, int64_t n, int act, int64_t per, void* stream) {
  silu_mul_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(g, u, out, n, act, per);
  return last_error();
}
int launch_add(const float* a, const float* b, float* out, int64_t n, void* stream) {
  add_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(a, b, out, n);
  return last_error();
}
int launch_softmax(const float* x, float* out, int rows, int m, void* stream) {
  softmax_k<<<blocks_for(rows), kThreads, 0, st(stream)>>>(x, out, rows, m);
  return last_error();
}
int launch_argmax(const float* x, int32_t* out, int rows, int m, void* stream) {
  argmax_k<<<blocks_for(rows), kThreads, 0, st(stream)>>>(x, out, rows, m);
  return last_error();
}

int launch_scale(const float* x, float* out, int64_t n, float scale, void* stream) {
  scale_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(x, out, n, scale);
  return last_error();
}
int launch_activation(const float* x, float* out, int64_t n, int act, void* stream) {
  activation_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(x, out, n, act);
  return last_error();
}
int launch_layer_norm(const float* x, const float* w, const float* b, float* out, int rows, int n, float eps,
                      void* stream) {
  layer_norm_k<<<rows, kThreads, 0, st(stream)>>>(x, w, b, out, n, eps);
  return last_error();
}
int launch_pool(const float* x, float* out, int n, int dim, int kind, void* stream) {
  pool_k<<<blocks_for(dim), kThreads, 0, st(stream)>>>(x, out, n, dim, kind);
  return last_error();
}
int launch_attention_noncausal(const float* q, const float* k, const float* v, float* out, int n, int heads,
                               int kv_heads, int hd, float scale, void* stream) {
  attention_noncausal_k<<<blocks_for(static_cast<int64_t>(n) * heads), kThreads, 0, st(stream)>>>(
      q, k, v, out, n, heads, kv_heads, hd, scale);
  return last_error();
}
int launch_split_heads(const float* x, float* a, float* b, int64_t rows, int d, void* stream) {
  split_heads_k<<<blocks_for(rows * d), kThreads, 0, st(stream)>>>(x, a, b, rows, d);
  return last_error();
}
int launch_causal_conv1d(const float* x, const float* weight, float* state, float* out, int n, int channels, int taps,
                         bool reset, void* stream) {
  causal_conv1d_k<<<blocks_for(channels), kThreads, 0, st(stream)>>>(x, weight, state, out, n, channels, taps, reset);
  return last_error();
}
int launch_gated_delta_rule(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                            const float* a, float* state, float* out, int n, int hv, int hk, int s, float eps,
                            bool reset, void* stream) {
  gated_delta_rule_k<<<blocks_for(static_cast<int64_t>(hv) * s), kThreads, 0, st(stream)>>>(
      qkv, alpha, beta, dt_bias, a, state, out, n, hv, hk, s, eps, reset);
  return last_error();
}
int launch_moe_route(const float* logits, const float* bias, const float* expert_scale, int32_t* ids, float* weights,
                     int n, int experts, int k, int gating, bool normalize, float scale, void* stream) {
  moe_route_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(logits, bias, expert_scale, ids, weights, n, experts, k,
                                                          gating, normalize, scale);
  return last_error();
}
int launch_moe_experts(const MoeExpertsArgs& args, void* stream) {
  for (int row0 = 0; row0 < args.n; row0 += args.chunk_rows) {
    const int rows = args.n - row0 < args.chunk_rows ? args.n - row0 : args.chunk_rows;
    if (args.ff > 0) {  // (no hidden units: each expert gives its down bias alone)
      moe_gate_up_k<<<blocks_for(static_cast<int64_t>(rows) * args.k * args.ff * 32), kThreads, 0, st(stream)>>>(
          args, row0, rows);
      if (const int e = last_error(); e != 0) return e;
    }
    moe_down_k<<<blocks_for(static_cast<int64_t>(rows) * args.dim * 32), kThreads, 0, st(stream)>>>(args, row0, rows);
    if (const int e = last_error(); e != 0) return e;
  }
  return 0;
}

}  // namespace tessera::ops::cuda
