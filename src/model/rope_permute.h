// Rotary layout conversion of Q/K projection rows.
//
// A head's rotary pairs are (x[2i], x[2i+1]) in the interleaved layout (llama2.c, Meta, llama.cpp's `llama`
// tensors) and (x[i], x[i + d/2]) in the rotate-half layout (Hugging Face, llama.cpp's `qwen2` tensors).
// Permuting the rows of W_q and W_k (and of a q/k bias) between the two makes a model compute the same
// attention under the other layout; this is what llama.cpp's HF->GGUF converter does for llama models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::model {

// Rows of `data` (rows x row_bytes, rows = n_heads * head_dim) reordered from rotate-half to interleaved
// (to_interleaved) or back.
std::vector<uint8_t> permute_rope_rows(const uint8_t* data, int64_t rows, size_t row_bytes, int n_heads,
                                       bool to_interleaved);

}  // namespace tessera::model
