// The encoder operators (BERT) and pooling, and gemma4's scale (ops.h LayerNormOp, ActivationOp,
// AttentionNonCausalOp, PoolOp, ScaleOp). One work-item per row, element, (query, head) or column, each sum in the
// reference's order (the reference sums in double; these in float, within the conformance bounds).

// One work-item per row: the mean, the mean squared deviation, then (x - mean) / sqrt(var + eps) * w (+ b). out may
// alias x: the row is read whole before it is written, by the same work-item.
__kernel void layer_norm(__global const float* x, ulong x_off, __global const float* w, ulong w_off,
                         __global const float* b, ulong b_off, int has_bias, __global float* out, ulong out_off,
                         int dim, float eps) {
  const ulong r = get_global_id(0);
  __global const float* xr = x + x_off + r * dim;
  __global float* o = out + out_off + r * dim;
  float sum = 0.0f;
  for (int j = 0; j < dim; ++j) sum += xr[j];
  const float mean = sum / dim;
  float sq = 0.0f;
  for (int j = 0; j < dim; ++j) {
    const float d = xr[j] - mean;
    sq += d * d;
  }
  const float inv = 1.0f / sqrt(sq / dim + eps);
  for (int j = 0; j < dim; ++j) {
    const float v = (xr[j] - mean) * inv * w[w_off + j];
    o[j] = has_bias ? v + b[b_off + j] : v;
  }
}

// act: 0 SiLU, 1 GELU (tanh, as silu_mul evaluates it), 3 GELU (erf), 5 tanh. One work-item per element.
__kernel void activation(__global const float* x, ulong x_off, __global float* out, ulong out_off, int act) {
  const ulong i = get_global_id(0);
  const float v = x[x_off + i];
  float r;
  if (act == 5) {
    r = tanh(v);
  } else if (act == 3) {
    r = 0.5f * v * (1.0f + erf(v * 0.70710678118654752f));
  } else if (act == 1) {
    r = v / (1.0f + exp(-2.0f * 0.79788456080286535588f * v * (1.0f + 0.044715f * v * v)));
  } else {
    r = v * (1.0f / (1.0f + exp(-v)));
  }
  out[out_off + i] = r;
}

__kernel void scale(__global const float* x, ulong x_off, __global float* out, ulong out_off, float s) {
  const ulong i = get_global_id(0);
  out[out_off + i] = x[x_off + i] * s;
}

// One work-item per (query i, head h) over all n keys of the sequence: the scores' maximum, then the exponentials'
// sum with the values accumulated into out, then out divided by the sum (three passes, no scratch).
__kernel void attention_noncausal(__global const float* q, ulong q_off, __global const float* k, ulong k_off,
                                  __global const float* v, ulong v_off, __global float* out, ulong out_off, int n,
                                  int heads, int kv_heads, int hd, float scale) {
  const int i = get_global_id(0), h = get_global_id(1);
  const int kvh = h / (heads / kv_heads);
  __global const float* qh = q + q_off + ((ulong)i * heads + h) * hd;
  __global float* o = out + out_off + ((ulong)i * heads + h) * hd;
  float mx = -INFINITY;
  for (int t = 0; t < n; ++t) {
    __global const float* kt = k + k_off + ((ulong)t * kv_heads + kvh) * hd;
    float s = 0.0f;
    for (int d = 0; d < hd; ++d) s += qh[d] * kt[d];
    s *= scale;
    mx = s > mx ? s : mx;
  }
  for (int d = 0; d < hd; ++d) o[d] = 0.0f;
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    __global const float* kt = k + k_off + ((ulong)t * kv_heads + kvh) * hd;
    float s = 0.0f;
    for (int d = 0; d < hd; ++d) s += qh[d] * kt[d];
    const float p = exp(s * scale - mx);
    sum += p;
    __global const float* vt = v + v_off + ((ulong)t * kv_heads + kvh) * hd;
    for (int d = 0; d < hd; ++d) o[d] += p * vt[d];
  }
  for (int d = 0; d < hd; ++d) o[d] /= sum;
}

// kind: 0 mean (the column's sum in row order, divided by n), 1 row 0, 2 row n - 1. One work-item per column.
__kernel void pool(__global const float* x, ulong x_off, __global float* out, ulong out_off, int n, int dim,
                   int kind) {
  const int j = get_global_id(0);
  if (kind != 0) {
    out[out_off + j] = x[x_off + (ulong)(kind == 1 ? 0 : n - 1) * dim + j];
    return;
  }
  float s = 0.0f;
  for (int r = 0; r < n; ++r) s += x[x_off + (ulong)r * dim + j];
  out[out_off + j] = s / n;
}
