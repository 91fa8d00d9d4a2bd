// CUDA kernels for Tessera's operators: straightforward first versions of each (one thread per output
// element or row; matrix products one warp per output with shuffle reduction), numerically following the
// reference (sequential row reductions, max-subtracted softmax, correctly rounded division and sqrt).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ void flag(int* err) { atomicCAS(err, 0, 1); }

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
int last_error() { return static_cast<int>(cudaGetLastError()); }

__global__ void embedding_k(const float* table, const int32_t* ids, float* out, int n, int dim, int vocab, int* err) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * dim) return;
  const int i = static_cast<int>(idx / dim), j = static_cast<int>(idx % dim);
  const int id = ids[i];
  if (id < 0 || id >= vocab) {
    flag(err);
    return;
  }
  out[idx] = table[static_cast<int64_t>(id) * dim + j];
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

__global__ void rope_k(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, float theta,
                       bool interleaved) {
  const int half = hd / 2;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n * half) return;
  const int t = idx / half, j = idx % half;
  const float freq = 1.0f / powf(theta, static_cast<float>(2 * j) / static_cast<float>(hd));
  const float angle = static_cast<float>(pos[t]) * freq;
  const float c = cosf(angle), s = sinf(angle);
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

template <typename T>
__global__ void attention_k(const float* q, const T* kc, const T* vc, const int32_t* tables, int stride,
                            const int32_t* lens, int start_pos, float* out, float* scores_all, int max_ctx, int count,
                            int heads, int kv_heads, int hd, int block_tokens, int num_blocks, int* err) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= count * heads) return;
  const int i = idx / heads, h = idx % heads;
  const int pos = lens ? lens[i] - 1 : start_pos + i;
  const int32_t* table = tables + (lens ? static_cast<int64_t>(i) * stride : 0);
  const int need = pos / block_tokens + 1;
  if (pos < 0 || pos >= max_ctx || need > stride) {
    flag(err);
    return;
  }
  for (int b = 0; b < need; ++b) {
    if (table[b] < 0 || table[b] >= num_blocks) {
      flag(err);
      return;
    }
  }
  const int kvh = h / (heads / kv_heads);
  const float* qh = q + static_cast<int64_t>(idx) * hd;
  float* oh = out + static_cast<int64_t>(idx) * hd;
  float* scores = scores_all + static_cast<int64_t>(idx) * max_ctx;
  const float denom = sqrtf(static_cast<float>(hd));
  float max_score = -INFINITY;
  for (int t = 0; t <= pos; ++t) {
    const int64_t row =
        ((static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens) * kv_heads + kvh) * hd;
    float s = 0.0f;
    for (int e = 0; e < hd; ++e) s += qh[e] * load(kc, row + e);
    s /= denom;
    scores[t] = s;
    max_score = s > max_score ? s : max_score;
  }
  float sum = 0.0f;
  for (int t = 0; t <= pos; ++t) {
    scores[t] = expf(scores[t] - max_score);
    sum += scores[t];
  }
  for (int t = 0; t <= pos; ++t) scores[t] /= sum;
  for (int e = 0; e < hd; ++e) oh[e] = 0.0f;
  for (int t = 0; t <= pos; ++t) {
    const int64_t row =
        ((static_cast<int64_t>(table[t / block_tokens]) * block_tokens + t % block_tokens) * kv_heads + kvh) * hd;
    const float a = scores[t];
    for (int e = 0; e < hd; ++e) oh[e] += a * load(vc, row + e);
  }
}

// One warp per output: lanes stride over k, then a shuffle reduction.
template <typename T>
__global__ void matmul_k(const float* x, const T* w, const float* bias, float* out, int n, int k, int m) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(n) * m) return;
  const int r = static_cast<int>(warp / m), i = static_cast<int>(warp % m);
  const float* xr = x + static_cast<int64_t>(r) * k;
  const T* wi = w + static_cast<int64_t>(i) * k;
  float s = 0.0f;
  for (int j = lane; j < k; j += 32) s += load(wi, j) * xr[j];
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) out[warp] = bias ? s + bias[i] : s;
}

__global__ void silu_mul_k(const float* g, const float* u, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v = g[i];
  v *= (1.0f / (1.0f + expf(-v)));
  out[i] = v * u[i];
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

}  // namespace

int launch_embedding(const float* table, const int32_t* ids, float* out, int n, int dim, int vocab, int* err,
                     void* stream) {
  embedding_k<<<blocks_for(static_cast<int64_t>(n) * dim), kThreads, 0, st(stream)>>>(table, ids, out, n, dim, vocab,
                                                                                      err);
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
int launch_rope(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, float theta,
                bool interleaved, void* stream) {
  rope_k<<<blocks_for(static_cast<int64_t>(n) * (hd / 2)), kThreads, 0, st(stream)>>>(q, k, pos, n, q_heads, k_heads,
                                                                                      hd, theta, interleaved);
  return last_error();
}
int launch_kv_write(const float* k, const float* v, void* kc, void* vc, bool f16, const int32_t* slots, int n, int row,
                    int capacity, int* err, void* stream) {
  const int b = blocks_for(static_cast<int64_t>(n) * row);
  if (f16) {
    kv_write_k<__half><<<b, kThreads, 0, st(stream)>>>(k, v, static_cast<__half*>(kc), static_cast<__half*>(vc), slots,
                                                       n, row, capacity, err);
  } else {
    kv_write_k<float><<<b, kThreads, 0, st(stream)>>>(k, v, static_cast<float*>(kc), static_cast<float*>(vc), slots, n,
                                                      row, capacity, err);
  }
  return last_error();
}
int launch_attention(const float* q, const void* kc, const void* vc, bool f16, const int32_t* tables, int stride,
                     const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                     int kv_heads, int hd, int block_tokens, int num_blocks, int* err, void* stream) {
  const int b = blocks_for(static_cast<int64_t>(count) * heads);
  if (f16) {
    attention_k<__half><<<b, kThreads, 0, st(stream)>>>(
        q, static_cast<const __half*>(kc), static_cast<const __half*>(vc), tables, stride, lens, start_pos, out, scores,
        max_ctx, count, heads, kv_heads, hd, block_tokens, num_blocks, err);
  } else {
    attention_k<float><<<b, kThreads, 0, st(stream)>>>(q, static_cast<const float*>(kc), static_cast<const float*>(vc),
                                                       tables, stride, lens, start_pos, out, scores, max_ctx, count,
                                                       heads, kv_heads, hd, block_tokens, num_blocks, err);
  }
  return last_error();
}
int launch_matmul(const float* x, const void* w, bool f16, const float* bias, float* out, int n, int k, int m,
                  void* stream) {
  const int b = blocks_for(static_cast<int64_t>(n) * m * 32);
  if (f16) {
    matmul_k<__half><<<b, kThreads, 0, st(stream)>>>(x, static_cast<const __half*>(w), bias, out, n, k, m);
  } else {
    matmul_k<float><<<b, kThreads, 0, st(stream)>>>(x, static_cast<const float*>(w), bias, out, n, k, m);
  }
  return last_error();
}
int launch_silu_mul(const float* g, const float* u, float* out, int64_t n, void* stream) {
  silu_mul_k<<<blocks_for(n), kThreads, 0, st(stream)>>>(g, u, out, n);
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

}  // namespace tessera::ops::cuda
