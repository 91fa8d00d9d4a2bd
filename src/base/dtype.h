// DType: element types of weights, activations and KV cache, shared by model files and backends.
//
// Block-quantised types use GGUF's (ggml's) layouts, defined in base/quant.h: the classic types (q8_0,
// q4_0, q4_1, q5_0, q5_1) store 32 elements per block with an f16 scale (and an f16 minimum for the _1
// types); the K-quants (q2_k ... q6_k) store 256-element super-blocks of 16 or 32-element sub-blocks whose
// scales are themselves quantised; mxfp4 (gpt-oss's experts) stores 32 four-bit E2M1 values per block with a
// shared power-of-two (E8M0) scale. A block type's size is only defined for element counts that are a
// multiple of its block size. New enumerators are appended: values may be stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tessera {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kI32,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kMXFP4,
};

struct DTypeInfo {
  std::string_view name;  // "f32", "q8_0", "q4_k", ...
  int block_elems;        // elements per storage block (1 for plain types)
  int block_bytes;        // bytes per storage block
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
// Accepts the names above in any case ("Q4_K" too, as llama.cpp spells them).
std::optional<DType> parse_dtype(std::string_view name);
// Every DType, in enumerator order.
std::span<const DType> all_dtypes();
// Block-quantised weight types (block_elems > 1).
inline bool dtype_is_quantized(DType t) { return dtype_info(t).block_elems > 1; }
// Bytes to store n elements; n must be a multiple of block_elems (checked by the caller's validation).
inline size_t dtype_bytes(DType t, size_t n) {
  const DTypeInfo& i = dtype_info(t);
  return n / static_cast<size_t>(i.block_elems) * static_cast<size_t>(i.block_bytes);
}

}  // namespace tessera
