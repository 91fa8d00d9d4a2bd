// Tessera's operators in OpenCL C 1.2, compiled at load by the platform's compiler (opencl_backend.cc).
//
// Tensors arrive as a typed base pointer plus an element offset. Data-dependent checks (token ids, KV
// slots, block numbers) cannot return a status from a kernel: an offending work-item skips its work and
// records a code in `err`, which Stream::synchronize() turns into OutOfRange. Weights may be f32 or f16
// (read with vload_half, core OpenCL: no cl_khr_fp16 needed), or GGUF blocks (kernels_quant.cl); the KV
// cache may be f32 or f16.
// Reductions that the reference does sequentially are done sequentially here too (one work-item per row),
// so only the matrix products and attention dot products sum in another order.

#define ERR_INDEX 1

inline void flag(__global int* err) { atomic_cmpxchg(err, 0, ERR_INDEX); }

__kernel void embedding(__global const float* table, ulong table_off, __global const int* ids, ulong ids_off,
                        __global float* out, ulong out_off, int dim, int vocab, float scale, __global int* err) {
  const int i = get_global_id(0), j = get_global_id(1);
  const int id = ids[ids_off + i];
  if (id < 0 || id >= vocab) {
    flag(err);
    return;
  }
  const float v = table[table_off + (ulong)id * dim + j];
  out[out_off + (ulong)i * dim + j] = scale == 1.0f ? v : v * scale;
}

inline void rms_row(__global const float* x, __global const float* w, __global float* out, int n, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= (float)n;
  ss += eps;
  ss = 1.0f / sqrt(ss);
  for (int j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

__kernel void rms_norm(__global const float* x, ulong x_off, __global const float* w, ulong w_off,
                       __global float* out, ulong out_off, int n, float eps) {
  const int r = get_global_id(0);
  rms_row(x + x_off + (ulong)r * n, w + w_off, out + out_off + (ulong)r * n, n, eps);
}

__kernel void add_rms_norm(__global float* res, ulong res_off, __global const float* d, ulong d_off,
                           __global const float* w, ulong w_off, __global float* out, ulong out_off, int n,
                           float eps) {
  const int r = get_global_id(0);
  __global float* x = res + res_off + (ulong)r * n;
  __global const float* dr = d + d_off + (ulong)r * n;
  for (int j = 0; j < n; ++j) x[j] += dr[j];
  rms_row(x, w + w_off, out + out_off + (ulong)r * n, n, eps);
}

// One work-item per (token, pair j): turns pair j of every q and k head of that token. Only the first `rot`
// elements of a head turn (partial rotary; rot == hd: the whole head), pair j by pos * theta^(-2j/rot).
__kernel void rope(__global float* q, ulong q_off, __global float* k, ulong k_off, __global const int* pos,
                   ulong pos_off, int q_heads, int k_heads, int hd, int rot, float theta, int interleaved,
                   __global const float* freqs, ulong freqs_off, int has_freqs, float mscale) {
  const int t = get_global_id(0), j = get_global_id(1), half_rot = rot / 2;
  const float freq = has_freqs ? freqs[freqs_off + j] : 1.0f / pow(theta, (float)(2 * j) / (float)rot);
  const float angle = (float)pos[pos_off + t] * freq;
  float c = cos(angle), s = sin(angle);
  if (has_freqs) {
    c *= mscale;
    s *= mscale;
  }
  const int a = interleaved ? 2 * j : j;
  const int b = interleaved ? 2 * j + 1 : j + half_rot;
  for (int h = 0; h < q_heads; ++h) {
    __global float* x = q + q_off + ((ulong)t * q_heads + h) * hd;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
  for (int h = 0; h < k_heads; ++h) {
    __global float* x = k + k_off + ((ulong)t * k_heads + h) * hd;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

#define KV_WRITE(NAME, T, STORE)                                                                               \
  __kernel void NAME(__global const float* k, ulong k_off, __global const float* v, ulong v_off, __global T* kc, \
                     ulong kc_off, __global T* vc, ulong vc_off, __global const int* slots, ulong slots_off,     \
                     int row, int capacity, __global int* err) {                                                \
    const int t = get_global_id(0), i = get_global_id(1);                                                       \
    const int slot = slots[slots_off + t];                                                                      \
    if (slot < 0 || slot >= capacity) {                                                                         \
      flag(err);                                                                                                \
      return;                                                                                                   \
    }                                                                                                           \
    const ulong dst = (ulong)slot * row + i;                                                                    \
    STORE(k[k_off + (ulong)t * row + i], kc, kc_off + dst);                                                     \
    STORE(v[v_off + (ulong)t * row + i], vc, vc_off + dst);                                                     \
  }
// base/quant's f32_to_bf16: round to nearest even, a NaN kept quiet.
inline ushort f32_to_bf16(float f) {
  uint x = as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (ushort)(x >> 16);
}
#define STORE_F32(val, p, idx) p[idx] = val
#define STORE_F16(val, p, idx) vstore_half_rte(val, idx, p)
#define STORE_BF16(val, p, idx) p[idx] = f32_to_bf16(val)
KV_WRITE(kv_write_f32, float, STORE_F32)
KV_WRITE(kv_write_f16, half, STORE_F16)
KV_WRITE(kv_write_bf16, ushort, STORE_BF16)

// One block of 32 values as base/quant's quantize_q8_0 (scale amax / 127 stored as f16, each value times 1 / scale
// rounded half away from zero, as std::lround) and quantize_q4_0 (scale max / -8 from the value of largest
// magnitude, each value times 1 / scale plus 8.5 truncated and clamped to [0, 15], element j in the low nibble of
// byte j and element j + 16 in its high nibble). No contraction: x * id + 8.5 is two roundings there too.
inline void quantize_q8_0(__global const float* x, __global uchar* blk) {
#pragma OPENCL FP_CONTRACT OFF
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;  // std::fmax: a NaN is passed over
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  vstore_half_rte(d, 0, (__global half*)blk);
  for (int i = 0; i < 32; ++i) ((__global char*)blk)[2 + i] = (char)(int)round(x[i] * id);
}
inline void quantize_q4_0(__global const float* x, __global uchar* blk) {
#pragma OPENCL FP_CONTRACT OFF
  float amax = 0.0f, mx = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (fabs(x[i]) > amax) {
      amax = fabs(x[i]);
      mx = x[i];
    }
  }
  const float d = mx / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  vstore_half_rte(d, 0, (__global half*)blk);
  for (int j = 0; j < 16; ++j) {
    const float a = x[j] * id, b = x[j + 16] * id;
    const int qa = clamp((int)(a + 8.5f), 0, 15), qb = clamp((int)(b + 8.5f), 0, 15);
    blk[2 + j] = (uchar)(qa | (qb << 4));
  }
}

// Block caches (q8 1: q8_0, 34 bytes a block; 0: q4_0, 18): one work-item per (token, block of its row); cache
// offsets in bytes.
__kernel void kv_write_block(__global const float* k, ulong k_off, __global const float* v, ulong v_off,
                             __global uchar* kc, ulong kc_off, __global uchar* vc, ulong vc_off,
                             __global const int* slots, ulong slots_off, int row, int capacity, int q8,
                             __global int* err) {
  const int t = get_global_id(0), b = get_global_id(1);
  const int slot = slots[slots_off + t];
  if (slot < 0 || slot >= capacity) {
    flag(err);
    return;
  }
  const ulong bb = q8 ? 34 : 18;
  const ulong src = (ulong)t * row + (ulong)b * 32, dst = ((ulong)slot * (row / 32) + b) * bb;
  if (q8) {
    quantize_q8_0(k + k_off + src, kc + kc_off + dst);
    quantize_q8_0(v + v_off + src, vc + vc_off + dst);
  } else {
    quantize_q4_0(k + k_off + src, kc + kc_off + dst);
    quantize_q4_0(v + v_off + src, vc + vc_off + dst);
  }
}

// Attention of one query head at position `pos`, in the reference's order: scores (kept in `scores`),
// max-subtracted exponentials, normalised, then values accumulated position by position. `sink` (gpt-oss; -inf
// without one) is one more logit that takes probability and reads no value.
#define ATTEND(NAME, T, LOAD)                                                                                    \
  inline void NAME(__global const T* kc, __global const T* vc, __global const int* table, int pos,             \
                   __global const float* q, __global float* out, __global float* scores, int block_tokens,     \
                   int kv_heads, int kvh, int hd, float scale, float softcap, int first, float sink) {         \
    const float denom = sqrt((float)hd);                                                                       \
    float max_score = -INFINITY;                                                                               \
    for (int t = first; t <= pos; ++t) {                                                                       \
      const ulong row = (((ulong)table[t / block_tokens] * block_tokens + t % block_tokens) * kv_heads + kvh) * \
                        hd;                                                                                    \
      float s = 0.0f;                                                                                          \
      for (int i = 0; i < hd; ++i) s += q[i] * LOAD(kc, row + i);                                              \
      s = scale > 0.0f ? s * scale : s / denom;                                                                \
      if (softcap > 0.0f) s = softcap * tanh(s / softcap);                                                     \
      scores[t] = s;                                                                                           \
      max_score = s > max_score ? s : max_score;                                                               \
    }                                                                                                          \
    max_score = max_score < sink ? sink : max_score;                                                           \
    float sum = 0.0f;                                                                                          \
    for (int t = first; t <= pos; ++t) {                                                                       \
      scores[t] = exp(scores[t] - max_score);                                                                  \
      sum += scores[t];                                                                                        \
    }                                                                                                          \
    sum += exp(sink - max_score);                                                                              \
    for (int t = first; t <= pos; ++t) scores[t] /= sum;                                                       \
    for (int i = 0; i < hd; ++i) out[i] = 0.0f;                                                                \
    for (int t = first; t <= pos; ++t) {                                                                       \
      const ulong row = (((ulong)table[t / block_tokens] * block_tokens + t % block_tokens) * kv_heads + kvh) * \
                        hd;                                                                                    \
      const float a = scores[t];                                                                               \
      for (int i = 0; i < hd; ++i) out[i] += a * LOAD(vc, row + i);                                            \
    }                                                                                                          \
  }
// Element idx of a cache of the block types, widened as base/quant's dequantize: d * q (q4_0: d * (nibble - 8)).
inline float load_q8_0(__global const uchar* p, ulong idx) {
  __global const uchar* blk = p + (idx / 32) * 34;
  return vload_half(0, (__global const half*)blk) * (float)((__global const char*)blk)[2 + idx % 32];
}
inline float load_q4_0(__global const uchar* p, ulong idx) {
  __global const uchar* blk = p + (idx / 32) * 18;
  const int j = (int)(idx % 32);
  const int nib = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
  return vload_half(0, (__global const half*)blk) * (float)(nib - 8);
}
#define LOAD_F32(p, idx) p[idx]
#define LOAD_F16(p, idx) vload_half(idx, p)
#define LOAD_BF16(p, idx) as_float((uint)(p[idx]) << 16)
#define LOAD_Q8_0(p, idx) load_q8_0(p, idx)
#define LOAD_Q4_0(p, idx) load_q4_0(p, idx)
ATTEND(attend_f32, float, LOAD_F32)
ATTEND(attend_f16, half, LOAD_F16)
ATTEND(attend_bf16, ushort, LOAD_BF16)
ATTEND(attend_q8_0, uchar, LOAD_Q8_0)
ATTEND(attend_q4_0, uchar, LOAD_Q4_0)

// One work-item per (query, head). Query i is at position start_pos + i (prefill: one table) or
// lens[i] - 1 (decode: table row i). `scores` holds max_ctx floats per work-item.
#define ATTENTION(NAME, T, ATTEND_FN)                                                                             \
  __kernel void NAME(__global const float* q, ulong q_off, __global const T* kc, ulong kc_off, __global const T* vc, \
                     ulong vc_off, __global const int* tables, ulong tables_off, int table_stride,                \
                     __global const int* lens, ulong lens_off, int start_pos, int decode, __global float* out,    \
                     ulong out_off, __global float* scores, int max_ctx, int n_heads, int kv_heads, int hd,       \
                     int block_tokens, int num_blocks, float scale, float softcap, int window,                    \
                     __global const float* sinks, ulong sinks_off, int has_sinks, __global int* err) {            \
    const int i = get_global_id(0), h = get_global_id(1);                                                         \
    const int pos = decode ? lens[lens_off + i] - 1 : start_pos + i;                                              \
    __global const int* table = tables + tables_off + (decode ? (ulong)i * table_stride : 0);                    \
    const int need = pos / block_tokens + 1;                                                                      \
    if (pos < 0 || pos >= max_ctx || need > table_stride) {                                                       \
      flag(err);                                                                                                  \
      return;                                                                                                     \
    }                                                                                                             \
    for (int b = 0; b < need; ++b) {                                                                              \
      if (table[b] < 0 || table[b] >= num_blocks) {                                                               \
        flag(err);                                                                                                \
        return;                                                                                                   \
      }                                                                                                           \
    }                                                                                                             \
    const ulong qo = ((ulong)i * n_heads + h) * hd;                                                               \
    ATTEND_FN(kc + kc_off, vc + vc_off, table, pos, q + q_off + qo, out + out_off + qo,                          \
              scores + ((ulong)i * n_heads + h) * max_ctx, block_tokens, kv_heads, h / (n_heads / kv_heads), hd,  \
              scale, softcap, window > 0 ? max(0, pos - window + 1) : 0,                                          \
              has_sinks ? sinks[sinks_off + h] : -INFINITY);                                                      \
  }
ATTENTION(attention_f32, float, attend_f32)
ATTENTION(attention_f16, half, attend_f16)
ATTENTION(attention_bf16, ushort, attend_bf16)
ATTENTION(attention_q8_0, uchar, attend_q8_0)
ATTENTION(attention_q4_0, uchar, attend_q4_0)

// out[r, i] = dot(w row i, x row r) (+ bias[i]). One work-item per output; four-wide loads.
#define MATMUL(NAME, T, LOAD4, LOAD1)                                                                              \
  __kernel void NAME(__global const float* x, ulong x_off, __global const T* w, ulong w_off, __global float* out, \
                     ulong out_off, __global const float* bias, ulong bias_off, int has_bias, int k, int m) {     \
    const int i = get_global_id(0), r = get_global_id(1);                                                          \
    __global const float* xr = x + x_off + (ulong)r * k;                                                           \
    const ulong wr = w_off + (ulong)i * k;                                                                         \
    float4 acc = (float4)(0.0f);                                                                                   \
    int j = 0;                                                                                                     \
    for (; j + 4 <= k; j += 4) acc = fma(LOAD4(w, wr + j), vload4(0, xr + j), acc);                               \
    float s = (acc.x + acc.y) + (acc.z + acc.w);                                                                   \
    for (; j < k; ++j) s += LOAD1(w, wr + j) * xr[j];                                                              \
    out[out_off + (ulong)r * m + i] = has_bias ? s + bias[bias_off + i] : s;                                       \
  }
#define LOAD4_F32(p, idx) vload4(0, p + (idx))
#define LOAD1_F32(p, idx) p[idx]
#define LOAD4_F16(p, idx) vload_half4(0, p + (idx))
#define LOAD1_F16(p, idx) vload_half(0, p + (idx))
MATMUL(matmul_f32, float, LOAD4_F32, LOAD1_F32)
MATMUL(matmul_f16, half, LOAD4_F16, LOAD1_F16)

// act: 0 SiLU, 1 GELU (tanh), 2 sigmoid. One work-item per element of up; the gate element of up's element i is
// i / per (per 1: elementwise; per = row width: one gate per row, Qwen3.5-MoE's shared expert).
__kernel void silu_mul(__global const float* g, ulong g_off, __global const float* u, ulong u_off,
                       __global float* out, ulong out_off, int act, ulong per) {
  const ulong i = get_global_id(0);
  float v = g[g_off + (per == 1 ? i : i / per)];
  if (act == 2) {  // ref's arithmetic: up / (1 + exp(-gate))
    out[out_off + i] = u[u_off + i] / (1.0f + exp(-v));
    return;
  }
  // GELU's tanh approximation as ref evaluates it: x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))).
  if (act == 1) {
    out[out_off + i] = v / (1.0f + exp(-2.0f * 0.79788456080286535588f * v * (1.0f + 0.044715f * v * v))) * u[u_off + i];
    return;
  }
  v *= (1.0f / (1.0f + exp(-v)));
  v *= u[u_off + i];
  out[out_off + i] = v;
}

__kernel void add(__global const float* a, ulong a_off, __global const float* b, ulong b_off, __global float* out,
                  ulong out_off) {
  const ulong i = get_global_id(0);
  out[out_off + i] = a[a_off + i] + b[b_off + i];
}

__kernel void softmax(__global const float* x, ulong x_off, __global float* out, ulong out_off, int m) {
  const ulong r = get_global_id(0);
  __global const float* xr = x + x_off + r * m;
  __global float* o = out + out_off + r * m;
  float mx = -INFINITY;
  for (int i = 0; i < m; ++i) mx = xr[i] > mx ? xr[i] : mx;
  float sum = 0.0f;
  for (int i = 0; i < m; ++i) {
    o[i] = exp(xr[i] - mx);
    sum += o[i];
  }
  for (int i = 0; i < m; ++i) o[i] /= sum;
}

__kernel void argmax(__global const float* x, ulong x_off, __global int* out, ulong out_off, int m) {
  const ulong r = get_global_id(0);
  __global const float* xr = x + x_off + r * m;
  int best = 0;
  for (int i = 1; i < m; ++i) {
    if (xr[i] > xr[best]) best = i;
  }
  out[out_off + r] = best;
}
