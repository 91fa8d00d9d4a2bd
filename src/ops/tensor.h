// Tensor: a typed, shaped, non-owning view of a device Buffer (row-major and contiguous).
//
// Operators take Tensors; the engine owns Buffers. A view is valid while its Buffer lives. Up to 4 dims;
// dims[0] is the outermost ("rows").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/check.h"
#include "base/dtype.h"

namespace tessera::ops {

class Buffer;

struct Tensor {
  static constexpr int kMaxRank = 4;

  Buffer* buffer = nullptr;
  size_t offset = 0;  // bytes from the start of the buffer
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};

  Tensor() = default;
  Tensor(Buffer* b, size_t off, DType t, std::initializer_list<int64_t> shape) : buffer(b), offset(off), dtype(t) {
    TS_CHECK(shape.size() <= kMaxRank);
    for (int64_t d : shape) dims[static_cast<size_t>(rank++)] = d;
  }

  bool valid() const { return buffer != nullptr; }
  int64_t dim(int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
    return n;
  }
  // Elements in one row (the product of all dims but the first).
  int64_t row_elems() const { return rank == 0 ? 1 : numel() / dims[0]; }
  size_t bytes() const { return dtype_bytes(dtype, static_cast<size_t>(numel())); }
  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<size_t>(row_elems())); }

  // Rows [start, start + count) of the outermost dimension.
  Tensor rows(int64_t start, int64_t count) const {
    TS_CHECK(rank >= 1 && start >= 0 && count >= 0 && start + count <= dims[0]);
    Tensor t = *this;
    t.offset += static_cast<size_t>(start) * row_bytes();
    t.dims[0] = count;
    return t;
  }
  // The same bytes under another shape with the same element count.
  Tensor reshaped(std::initializer_list<int64_t> shape) const {
    Tensor t(buffer, offset, dtype, shape);
    TS_CHECK(t.numel() == numel());
    return t;
  }

  std::string shape_string() const;  // "[4, 8, 16] f32"
};

}  // namespace tessera::ops
