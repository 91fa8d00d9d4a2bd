// Gated delta-net linear attention (Qwen3.5; ops.h SplitHeadsOp, CausalConv1dOp, GatedDeltaRuleOp), appended after
// kernels.cl.
//
// The reference's arithmetic, in its order for each output: every sum is taken sequentially by one work-item.
// split_heads: one work-item per (row, element). causal_conv1d: one work-item per channel, over all n tokens (the
// window it reads is its own channel's carried rows, then x; it writes its channel's last K - 1 rows back after).
// gated_delta_rule: one work-item per (value head h, value element j). Row j of head h's S x S state only ever
// depends on itself (the delta rule's update is d_j k_i, d_j read from row j alone), so a work-item owns one state
// row and carries it through the n tokens in order; each recomputes the token's q and k norms (S multiplies, the
// same order of work as its row's).

__kernel void split_heads(__global const float* x, ulong x_off, __global float* a, ulong a_off, __global float* b,
                          ulong b_off, int d) {
  const ulong r = get_global_id(0);
  const int j = get_global_id(1);
  __global const float* xr = x + x_off + r * 2 * d;
  a[a_off + r * d + j] = xr[j];
  b[b_off + r * d + j] = xr[d + j];
}

// x [n, C]; weight [C, K]; state [K - 1, C] (read as zeros when reset, then replaced); out [n, C].
__kernel void causal_conv1d(__global const float* x, ulong x_off, __global const float* weight, ulong w_off,
                            __global float* state, ulong s_off, __global float* out, ulong out_off, int n,
                            int channels, int taps, int reset) {
  const int c = get_global_id(0), keep = taps - 1;
  __global const float* w = weight + w_off + (ulong)c * taps;
  __global float* st = state + s_off;
  for (int t = 0; t < n; ++t) {
    float sum = 0.0f;
    for (int i = 0; i < taps; ++i) {
      const int r = t + i;  // row of the window [state; x]
      const float v =
          r < keep ? (reset ? 0.0f : st[(ulong)r * channels + c]) : x[x_off + (ulong)(r - keep) * channels + c];
      sum += v * w[i];
    }
    out[out_off + (ulong)t * channels + c] = sum / (1.0f + exp(-sum));
  }
  // The window's last keep rows; ascending r reads rows at or after r, so in place is safe.
  for (int r = 0; r < keep; ++r) {
    const int src = n + r;
    st[(ulong)r * channels + c] =
        src < keep ? (reset ? 0.0f : st[(ulong)src * channels + c]) : x[x_off + (ulong)(src - keep) * channels + c];
  }
}

inline float softplus_ggml(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }

// 1 / max(|x|, eps) over s elements, summed in order.
inline float inv_l2(__global const float* x, int s, float eps) {
  float sum = 0.0f;
  for (int i = 0; i < s; ++i) sum += x[i] * x[i];
  return 1.0f / max(sqrt(sum), eps);
}

// qkv [n, 2 Hk S + Hv S]; alpha, beta [n, Hv]; dt_bias, a [Hv]; state [Hv, S, S]; out [n, Hv, S].
__kernel void gated_delta_rule(__global const float* qkv, ulong qkv_off, __global const float* alpha, ulong al_off,
                               __global const float* beta, ulong be_off, __global const float* dt_bias, ulong dt_off,
                               __global const float* a, ulong a_off, __global float* state, ulong s_off,
                               __global float* out, ulong out_off, int n, int hv, int hk, int s, float eps, int reset) {
  const int h = get_global_id(0), j = get_global_id(1), kh = h % hk, width = (2 * hk + hv) * s;
  __global float* m = state + s_off + ((ulong)h * s + j) * s;  // row j: value j against every key i
  if (reset) {
    for (int i = 0; i < s; ++i) m[i] = 0.0f;
  }
  const float scale = 1.0f / sqrt((float)s);
  const float ah = a[a_off + h], dt = dt_bias[dt_off + h];
  for (int t = 0; t < n; ++t) {
    __global const float* row = qkv + qkv_off + (ulong)t * width;
    __global const float* q = row + kh * s;
    __global const float* k = row + (hk + kh) * s;
    const float qs = inv_l2(q, s, eps), ks = inv_l2(k, s, eps);
    const float g = exp(softplus_ggml(alpha[al_off + (ulong)t * hv + h] + dt) * ah);
    const float b = 1.0f / (1.0f + exp(-beta[be_off + (ulong)t * hv + h]));
    float dot = 0.0f;
    for (int i = 0; i < s; ++i) {
      m[i] *= g;
      dot += m[i] * (k[i] * ks);
    }
    const float d = (row[(2 * hk + h) * s + j] - dot) * b;
    float o = 0.0f;
    for (int i = 0; i < s; ++i) {
      m[i] += d * (k[i] * ks);
      o += m[i] * (q[i] * qs);
    }
    out[out_off + ((ulong)t * hv + h) * s + j] = o * scale;
  }
}
