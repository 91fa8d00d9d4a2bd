// Launch functions for the CUDA kernels (kernels.cu), callable from plain C++ (cuda_backend.cc). Pointers
// are device pointers already offset to the tensor's first element; `stream` is a cudaStream_t; `err` is a
// device int where kernels flag an index out of range (read back at synchronize). Each returns the
// launch's cudaError_t as an int (0 = success).
#pragma once

#include <cstdint>

namespace tessera::ops::cuda {

// Weights and embedding tables arrive as bytes of any stored type (`dtype`: the DType enumerator value): row i
// starts at byte i * row_bytes; each element is widened exactly as base/quant's dequantize() does.
// The kernels' own decoder (dq) run on the host over one row of k elements: what tests compare with base/quant's
// dequantize() on machines without a GPU.
void cuda_dequantize_row(int dtype, const uint8_t* row, int64_t k, float* out);
int launch_embedding(const uint8_t* table, int dtype, int64_t row_bytes, const int32_t* ids, float* out, int n, int dim,
                     int vocab, float scale, int* err, void* stream);
int launch_rms_norm(const float* x, const float* w, float* out, int rows, int n, float eps, void* stream);
int launch_add_rms_norm(float* res, const float* delta, const float* w, float* out, int rows, int n, float eps,
                        void* stream);
// Turns the first rot (even, <= hd) elements of each head; freqs: null for theta^(-2j/rot), else per-pair inverse
// frequencies with cos and sin times mscale.
int launch_rope(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, int rot, float theta,
                bool interleaved, const float* freqs, float mscale, void* stream);
// ctype: the caches' type, a kernel_math.h kCache* value (f32, f16, bf16, or q8_0 / q4_0 blocks of 32: row a
// multiple of 32, caches then addressed in bytes).
int launch_kv_write(const float* k, const float* v, void* kc, void* vc, int ctype, const int32_t* slots, int n, int row,
                    int capacity, int* err, void* stream);
// decode: lens non-null, tables hold `count` rows of `stride`; prefill: lens null, one table, positions
// start_pos + i. scores: count * heads * max_ctx floats of scratch.
// scale > 0: scores q.k * scale (else / sqrt(hd)); softcap > 0: cap * tanh(s / cap); window > 0: only the last
// `window` positions (ops.h, AttentionScores). sinks: null, or one extra softmax logit per query head.
int launch_attention(const float* q, const void* kc, const void* vc, int ctype, const int32_t* tables, int stride,
                     const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                     int kv_heads, int hd, int block_tokens, int num_blocks, float scale, float softcap, int window,
                     const float* sinks, int* err, void* stream);
int launch_matmul(const float* x, const uint8_t* w, int dtype, int64_t row_bytes, const float* bias, float* out, int n,
                  int k, int m, void* stream);
// act(gate) * up for n elements of up, act a kernel_math.h kAct* value (silu, gelu_tanh or sigmoid); `per` up
// elements share one gate element (1, or the row width for the sigmoid gate's [rows, 1] form).
int launch_silu_mul(const float* g, const float* u, float* out, int64_t n, int act, int64_t per, void* stream);
int launch_add(const float* a, const float* b, float* out, int64_t n, void* stream);
int launch_softmax(const float* x, float* out, int rows, int m, void* stream);
int launch_argmax(const float* x, int32_t* out, int rows, int m, void* stream);
int launch_scale(const float* x, float* out, int64_t n, float scale, void* stream);
// act: kActSilu, kActGeluTanh or kActGeluErf (kernel_math.h).
int launch_activation(const float* x, float* out, int64_t n, int act, void* stream);
// b may be null; out may be x.
int launch_layer_norm(const float* x, const float* w, const float* b, float* out, int rows, int n, float eps,
                      void* stream);
// kind: kPoolMean, kPoolFirst or kPoolLast (kernel_math.h); out [dim].
int launch_pool(const float* x, float* out, int n, int dim, int kind, void* stream);
// scale > 0: scores q.k * scale, else q.k / sqrt(hd). Needs no scratch.
int launch_attention_noncausal(const float* q, const float* k, const float* v, float* out, int n, int heads,
                               int kv_heads, int hd, float scale, void* stream);
// x [rows, 2 d] -> a, b [rows, d].
int launch_split_heads(const float* x, float* a, float* b, int64_t rows, int d, void* stream);
int launch_causal_conv1d(const float* x, const float* weight, float* state, float* out, int n, int channels, int taps,
                         bool reset, void* stream);
// hv value heads, hk key heads, head width s.
int launch_gated_delta_rule(const float* qkv, const float* alpha, const float* beta, const float* dt_bias,
                            const float* a, float* state, float* out, int n, int hv, int hk, int s, float eps,
                            bool reset, void* stream);
// gating: a kernel_math.h kGate* value; bias and expert_scale may be null.
int launch_moe_route(const float* logits, const float* bias, const float* expert_scale, int32_t* ids, float* weights,
                     int n, int experts, int k, int gating, bool normalize, float scale, void* stream);

// MoeExpertsOp's operands. gate and up point at expert 0's first row of each (fused gate_up: up = gate + ff rows);
// expert e's row i of either starts at e * expert_bytes + i * row_bytes, and of down at e * down_expert_bytes +
// i * down_row_bytes. Biases may be null. h is scratch of chunk_rows * k * ff floats: the rows go through the two
// kernels chunk_rows at a time. An expert id outside [0, experts) raises *err.
struct MoeExpertsArgs {
  const float* x;
  const int32_t* ids;
  const float* weights;
  const uint8_t* gate;
  const uint8_t* up;
  int gate_type;
  int64_t expert_bytes, row_bytes;
  const float* gate_bias;
  const float* up_bias;
  const uint8_t* down;
  int down_type;
  int64_t down_expert_bytes, down_row_bytes;
  const float* down_bias;
  float* out;
  float* h;
  int n, dim, k, ff, experts, act;  // act: kActSilu, kActGeluTanh or kActSwigluOai
  float alpha, limit;
  int chunk_rows;
  int* err;
};
int launch_moe_experts(const MoeExpertsArgs& args, void* stream);

}  // namespace tessera::ops::cuda
