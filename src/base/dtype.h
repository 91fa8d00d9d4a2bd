// DType: element types of weights, activations and KV cache, shared by model files and backends.
//
// Block-quantised types (q8_0, q4_0) use GGUF's layouts: 32 elements per block with one f16 scale. Their
// size is only defined for element counts that are a multiple of the block size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kI32 };

struct DTypeInfo {
  std::string_view name;  // "f32", "q8_0", ...
  int block_elems;        // elements per storage block (1 for plain types)
  int block_bytes;        // bytes per storage block
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> parse_dtype(std::string_view name);
// Bytes to store n elements; n must be a multiple of block_elems (checked by the caller's validation).
inline size_t dtype_bytes(DType t, size_t n) {
  const DTypeInfo& i = dtype_info(t);
  return n / static_cast<size_t>(i.block_elems) * static_cast<size_t>(i.block_bytes);
}

}  // namespace tessera
