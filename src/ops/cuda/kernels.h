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
// freqs: null for theta^(-2j/hd), else per-pair inverse frequencies with cos and sin times mscale.
int launch_rope(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, float theta,
                bool interleaved, const float* freqs, float mscale, void* stream);
// f16: caches hold IEEE half values.
int launch_kv_write(const float* k, const float* v, void* kc, void* vc, bool f16, const int32_t* slots, int n, int row,
                    int capacity, int* err, void* stream);
// decode: lens non-null, tables hold `count` rows of `stride`; prefill: lens null, one table, positions
// start_pos + i. scores: count * heads * max_ctx floats of scratch.
// scale > 0: scores q.k * scale (else / sqrt(hd)); softcap > 0: cap * tanh(s / cap); window > 0: only the last
// `window` positions (ops.h, AttentionScores).
int launch_attention(const float* q, const void* kc, const void* vc, bool f16, const int32_t* tables, int stride,
                     const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                     int kv_heads, int hd, int block_tokens, int num_blocks, float scale, float softcap, int window,
                     int* err, void* stream);
int launch_matmul(const float* x, const uint8_t* w, int dtype, int64_t row_bytes, const float* bias, float* out, int n,
                  int k, int m, void* stream);
// gelu: GELU's tanh approximation times up (ops.h), else silu(gate) * up.
int launch_silu_mul(const float* g, const float* u, float* out, int64_t n, bool gelu, void* stream);
int launch_add(const float* a, const float* b, float* out, int64_t n, void* stream);
int launch_softmax(const float* x, float* out, int rows, int m, void* stream);
int launch_argmax(const float* x, int32_t* out, int rows, int m, void* stream);

}  // namespace tessera::ops::cuda
