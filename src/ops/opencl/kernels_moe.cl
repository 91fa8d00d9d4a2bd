// Mixture of experts (ops.h MoeRouteOp, MoeExpertsOp), appended after kernels_quant.cl (whose row dots it uses).
//
// moe_route: one work-item per row, the host backends' arithmetic (ops/moe_route.cc) step for step: k passes over
// the experts, the larger score first, NaN last, ties to the lower expert.
// moe_experts, in three kernels over a scratch buffer: moe_gate_up_* (one work-item per (row, slot, hidden unit):
// gate and up rows of the slot's expert dotted with the row, biased, activated) into h [n * k, ff]; moe_down_* (one
// per (row, slot, output)) into y [n * k, dim]; moe_combine: out = sum over slots in order of weight * y. Each
// work-item reads its expert's weight row itself: a row routed to an expert re-reads that expert's rows (the cpu
// backend's grouping by expert is not done here). Weight tensors arrive as bytes at byte offsets (f32 at offsets
// that are a multiple of 4, the others of 2: capability() checks).

inline int moe_ranks_before(float a, int ia, float b, int ib) {
  if (isnan(a)) return isnan(b) && ia < ib;
  if (isnan(b)) return 1;
  return a > b || (a == b && ia < ib);
}

// gating: 0 softmax, 1 sigmoid, 2 softmax over the chosen; then each weight times its expert's scale where has_es.
__kernel void moe_route(__global const float* logits, ulong l_off, __global const float* bias, ulong b_off,
                        int has_bias, __global int* ids, ulong ids_off, __global float* w, ulong w_off, int experts,
                        int k, int gating, int normalize, float scale, __global const float* escale,
                        ulong es_off, int has_es) {
  const int r = get_global_id(0);
  __global const float* l = logits + l_off + (ulong)r * experts;
  __global int* rid = ids + ids_off + (ulong)r * k;
  __global float* rw = w + w_off + (ulong)r * k;
  float mx = -INFINITY, sum = 0.0f;
  if (gating == 0) {
    for (int i = 0; i < experts; ++i) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < experts; ++i) sum += exp(l[i] - mx);
  }
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_score = 0.0f, best_p = 0.0f;
    for (int i = 0; i < experts; ++i) {
      int taken = 0;
      for (int c = 0; c < j; ++c) taken |= rid[c] == i;
      if (taken) continue;
      const float p = gating == 0 ? exp(l[i] - mx) / sum : gating == 1 ? 1.0f / (1.0f + exp(-l[i])) : l[i];
      const float sc = has_bias ? p + bias[b_off + i] : p;
      if (best < 0 || moe_ranks_before(sc, i, best_score, best)) {
        best = i;
        best_score = sc;
        best_p = p;
      }
    }
    rid[j] = best;
    rw[j] = best_p;
  }
  if (gating == 2) {
    float m2 = -INFINITY, s2 = 0.0f;
    for (int j = 0; j < k; ++j) m2 = rw[j] > m2 ? rw[j] : m2;
    for (int j = 0; j < k; ++j) s2 += (rw[j] = exp(rw[j] - m2));
    for (int j = 0; j < k; ++j) rw[j] /= s2;
  }
  if (normalize) {
    float s3 = 0.0f;
    for (int j = 0; j < k; ++j) s3 += rw[j];
    s3 = s3 < 6.103515625e-5f ? 6.103515625e-5f : s3;  // as std::max(s3, c): a NaN sum stays NaN (fmax would not)
    for (int j = 0; j < k; ++j) rw[j] /= s3;
  }
  if (scale != 1.0f)
    for (int j = 0; j < k; ++j) rw[j] *= scale;
  if (has_es)  // per-expert output scales (gemma4)
    for (int j = 0; j < k; ++j) rw[j] *= escale[es_off + rid[j]];
}

inline float dot_f32(__global const uchar* row, __global const float* x, int k) {
  __global const float* w = (__global const float*)row;
  float s = 0.0f;
  for (int j = 0; j < k; ++j) s += w[j] * x[j];
  return s;
}
inline float dot_f16(__global const uchar* row, __global const float* x, int k) {
  __global const half* w = (__global const half*)row;
  float s = 0.0f;
  for (int j = 0; j < k; ++j) s += vload_half(j, w) * x[j];
  return s;
}
#define ROW_F32(k) ((ulong)(k) * 4)
#define ROW_F16(k) ((ulong)(k) * 2)

// act: 0 SiLU, 1 GELU (tanh), 2 gpt-oss's clamped SwiGLU; as ops/ref's gated().
inline float moe_act(int act, float g, float u, float alpha, float limit) {
  if (act == 1) return g / (1.0f + exp(-2.0f * 0.79788456080286535588f * g * (1.0f + 0.044715f * g * g))) * u;
  if (act == 2) {
    const float x = min(g, limit), y = clamp(u, -limit, limit);
    return x / (1.0f + exp(alpha * (-x))) * (y + 1.0f);
  }
  float v = g;
  v *= (1.0f / (1.0f + exp(-v)));
  return v * u;
}

#define MOE_KERNELS(SUFFIX, DOT, ROW)                                                                              \
  __kernel void moe_gate_up_##SUFFIX(                                                                              \
      __global const float* x, ulong x_off, __global const int* ids, ulong ids_off, __global const uchar* gate,    \
      ulong g_off, __global const uchar* up, ulong u_off, int fused, __global const float* gb, ulong gb_off,        \
      int has_gb, __global const float* ub, ulong ub_off, int has_ub, __global float* h, ulong h_off, int k,       \
      int dim, int ff, int experts, int act, float alpha, float limit, __global int* err) {                        \
    const int i = get_global_id(0), tk = get_global_id(1);                                                         \
    const int e = ids[ids_off + tk];                                                                               \
    __global float* out = h + h_off + (ulong)tk * ff + i;                                                          \
    if (e < 0 || e >= experts) {                                                                                   \
      flag(err);                                                                                                   \
      *out = 0.0f;                                                                                                 \
      return;                                                                                                      \
    }                                                                                                              \
    __global const float* xr = x + x_off + (ulong)(tk / k) * dim;                                                  \
    const ulong rb = ROW(dim);                                                                                     \
    const ulong grow = fused ? (ulong)e * 2 * ff + i : (ulong)e * ff + i;                                          \
    const ulong urow = fused ? (ulong)e * 2 * ff + ff + i : (ulong)e * ff + i;                                     \
    float g = DOT(gate + g_off + grow * rb, xr, dim);                                                              \
    float u = DOT(up + u_off + urow * rb, xr, dim);                                                                \
    if (has_gb) g += gb[gb_off + (ulong)e * ff + i];                                                               \
    if (has_ub) u += ub[ub_off + (ulong)e * ff + i];                                                               \
    *out = moe_act(act, g, u, alpha, limit);                                                                       \
  }                                                                                                                \
  __kernel void moe_down_##SUFFIX(__global const float* h, ulong h_off, __global const int* ids, ulong ids_off,   \
                                  __global const uchar* down, ulong d_off, __global const float* db, ulong db_off, \
                                  int has_db, __global float* y, ulong y_off, int k, int dim, int ff,              \
                                  int experts) {                                                                   \
    const int i = get_global_id(0), tk = get_global_id(1);                                                         \
    const int e = ids[ids_off + tk];                                                                               \
    __global float* out = y + y_off + (ulong)tk * dim + i;                                                         \
    if (e < 0 || e >= experts) { /* flagged by moe_gate_up */                                                      \
      *out = 0.0f;                                                                                                 \
      return;                                                                                                      \
    }                                                                                                              \
    float s = DOT(down + d_off + ((ulong)e * dim + i) * ROW(ff), h + h_off + (ulong)tk * ff, ff);                  \
    if (has_db) s += db[db_off + (ulong)e * dim + i];                                                              \
    *out = s;                                                                                                      \
  }
MOE_KERNELS(f32, dot_f32, ROW_F32)
MOE_KERNELS(f16, dot_f16, ROW_F16)
MOE_KERNELS(q8_0, dot_q8_0, ROW_Q8_0)
MOE_KERNELS(q4_0, dot_q4_0, ROW_Q4_0)
MOE_KERNELS(q4_k, dot_q4_k, ROW_Q4_K)
MOE_KERNELS(q6_k, dot_q6_k, ROW_Q6_K)

// out[t, i] = sum over slots j in order of w[t, j] * y[t * k + j, i] (the first product assigned, as ref).
__kernel void moe_combine(__global const float* y, ulong y_off, __global const float* w, ulong w_off,
                          __global float* out, ulong out_off, int k, int dim) {
  const int i = get_global_id(0), t = get_global_id(1);
  __global const float* yt = y + y_off + (ulong)t * k * dim + i;
  __global const float* wt = w + w_off + (ulong)t * k;
  float acc = yt[0] * wt[0];
  for (int j = 1; j < k; ++j) acc = acc + yt[(ulong)j * dim] * wt[j];
  out[out_off + (ulong)t * dim + i] = acc;
}
