// Launch functions for the CUDA kernels (kernels.cu), callable from plain C++ (cuda_backend.cc). Pointers
// are device pointers already offset to the tensor's first element; `stream` is a cudaStream_t; `err` is a
// device int where kernels flag an index out of range (read back at synchronize). Each returns the
// launch's cudaError_t as an int (0 = success).
#pragma once

#include <cstdint>

namespace tessera::ops::cuda {

int launch_embedding(const float* table, const int32_t* ids, float* out, int n, int dim, int vocab, int* err,
                     void* stream);
int launch_rms_norm(const float* x, const float* w, float* out, int rows, int n, float eps, void* stream);
int launch_add_rms_norm(float* res, const float* delta, const float* w, float* out, int rows, int n, float eps,
                        void* stream);
int launch_rope(float* q, float* k, const int32_t* pos, int n, int q_heads, int k_heads, int hd, float theta,
                bool interleaved, void* stream);
// f16: caches hold IEEE half values.
int launch_kv_write(const float* k, const float* v, void* kc, void* vc, bool f16, const int32_t* slots, int n, int row,
                    int capacity, int* err, void* stream);
// decode: lens non-null, tables hold `count` rows of `stride`; prefill: lens null, one table, positions
// start_pos + i. scores: count * heads * max_ctx floats of scratch.
int launch_attention(const float* q, const void* kc, const void* vc, bool f16, const int32_t* tables, int stride,
                     const int32_t* lens, int start_pos, float* out, float* scores, int max_ctx, int count, int heads,
                     int kv_heads, int hd, int block_tokens, int num_blocks, int* err, void* stream);
int launch_matmul(const float* x, const void* w, bool f16, const float* bias, float* out, int n, int k, int m,
                  void* stream);
int launch_silu_mul(const float* g, const float* u, float* out, int64_t n, void* stream);
int launch_add(const float* a, const float* b, float* out, int64_t n, void* stream);
int launch_softmax(const float* x, float* out, int rows, int m, void* stream);
int launch_argmax(const float* x, int32_t* out, int rows, int m, void* stream);

}  // namespace tessera::ops::cuda
