// Weight matrices repacked at load for the cpu backend's matmuls (q4_0, q5_0, q4_k, q6_k; q4_1, q5_1, mxfp4, q2_k, q3_k
// and q5_k except for amx; bf16 and f16 except for the generic build).
//
// The kernels of matmul_packed.h keep weight rows in the vector lanes: P rows (16 in the avx512 build, 8 in the
// avx2 one) advance together, one vpdpbusd (avx2: maddubs + madd) per four elements of all P rows. Reading that
// from GGUF's row-major blocks needs a transpose per group, which made batch-1 decode slower than the row-by-row
// kernels. So the cpu device rewrites each such matrix once, when the engine uploads it
// (Device::prepare_matmul_weight), into panels: for every run of P consecutive rows and every block column, one
// "panel block" of P * block-bytes holding the same bytes as the P blocks it replaces, rearranged:
//   q4_0: P f16 scales, then 4 vectors of P dwords (vector j, lane r: bytes 4j..4j+3 of row r's nibbles, so one
//         load gives elements 4j.. in the low nibbles and 16 + 4j.. in the high ones);
//   q5_0: P f16 scales, 1 vector of the rows' 32 fifth bits, then the nibbles as q4_0's;
//   mxfp4: P one-byte exponents, then the code nibbles as q4_0's;
//   q4_1, q5_1: P f16 d, P f16 m, then q4_0's nibbles (q5_1: q5_0's fifth bits and nibbles);
//   q4_k: P f16 d, P f16 dmin, 3 vectors of the 12 scale bytes, then 32 vectors of the nibbles (chunk c, dword j
//         at vector 8c + j: group 2c in the low nibbles, 2c + 1 in the high ones);
//   q5_k: q4_k's d, dmin and scales, then 8 vectors of qh (dword j: the fifth bits of elements 4j.. of every group,
//         group g at bit g), then q4_k's 32 vectors of nibbles;
//   q6_k: P f16 d, 4 vectors of the 16 int8 scales, 32 vectors of ql, 16 vectors of qh;
//   q2_k: P f16 d, P f16 dmin, 4 vectors of the 16 scale bytes, 16 vectors of qs;
//   q3_k: P f16 d, 3 vectors of the 12 scale bytes, 8 vectors of hmask, 16 vectors of qs;
//   bf16, f16, amx kernels (rows of a multiple of 32 elements; PanelLayout::pairs): per pair of elements one vector
//         of P dwords (lane r: row r's elements 2j, 2j + 1), so a panel is, 16 pairs at a time, the B operand of a
//         bf16 tile product (f16: once split into bf16 hi and lo, matmul_amx_dense.h);
//   bf16, f16, avx512 and avx2 kernels: per element one vector of P values (lane r: row r's element j), which one
//   widening
//         load turns into P f32 lanes (matmul_dense_panels.h). The pair layout was no faster there (bf16 widened
//         by a shift and a mask from one load per two elements: within the noise at [8192 x 2048] x 512 rows).
// q8_0 is not repacked: its lanes-are-rows kernel (one integer sum per block, its scale rounded to f16) was faster
// (decode 1.3x, prefill 2.3x llama.cpp) but rounds differently from the row-by-row kernels, and the strict
// llama.cpp parity check then fell to 6 of 8 identical continuations on stories15M Q8_0 (two ties 0.0019 apart;
// the row-by-row kernels keep 7 of 8). So q8_0 keeps matmul_quant.cc's kernels in every build, the amx one
// included: its int8 tiles give block sums, which only the lanes-are-rows rounding can use (measured on the amx
// kernels, 2026-12-03: with an f16 activation scale stories15M Q8_0 6 of 8; with an f32 one phi3_mini Q8_0 6 of 8;
// both misses at near ties, every other shape and preset passing).
// The size is unchanged and the rewrite is in place (no second copy). Rows past the last whole panel stay
// row-major and take the kernels for unpacked blocks. 4-bit types stay 4-bit: decode reads exactly the stored
// bytes.
//
// Safety: a repacked buffer is marked (PanelLayout, kept by the buffer). Only a matmul reading it as its weight
// operand, in the kernel build that packed it, and the embedding lookup (which gathers a row back from the panels)
// may touch it; Stream::read/write (downloads, transfers) and any other operator refuse it with FailedPrecondition
// instead of seeing rearranged bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "base/dtype.h"
#include "base/status.h"
#include "ops/backend.h"
#include "ops/cpu/worker_pool.h"
#include "ops/ops.h"

namespace tessera::ops::cpu {

// How a repacked matrix is laid out: `panel_rows` rows per panel, rows [0, whole * panel_rows) in panels,
// the rest row-major after them. A buffer of `matrices` > 1 holds a stack of such matrices one after another
// (the experts of a mixture-of-experts layer, [matrices, rows, cols]), each repacked on its own: a matmul may
// name any one of them as its weight, at offset i * matrix_bytes().
struct PanelLayout {
  DType type = DType::kF32;
  int64_t rows = 0, cols = 0;
  int panel_rows = 0;
  int64_t matrices = 1;
  bool pairs = false;  // bf16 / f16: the amx kernels' pair layout, else one element per vector (above)
  int64_t whole_panels() const { return rows / panel_rows; }
  size_t matrix_bytes() const { return dtype_bytes(type, static_cast<size_t>(rows * cols)); }
  // Whether a weight view at byte `offset` of its buffer, [rows, cols] of `type`, is one of these matrices.
  bool describes(DType t, int64_t r, int64_t c, size_t offset) const {
    return t == type && r == rows && c == cols && offset % matrix_bytes() == 0 &&
           static_cast<int64_t>(offset / matrix_bytes()) < matrices;
  }
};

// The cpu device's buffers: host memory (64-byte aligned, zeroed) that may carry a PanelLayout.
class CpuBuffer final : public Buffer {
 public:
  // Zeroed here, so every page is touched (and host memory committed) at allocation, not in the middle of serving;
  // over `pool`'s threads when given (the 8B model's weights: the kernel's page clearing is most of a load).
  static Result<std::unique_ptr<Buffer>> create(size_t bytes, WorkerPool* pool = nullptr);
  ~CpuBuffer() override;
  void* host_ptr() override { return data_; }
  const PanelLayout* panels() const { return panels_ ? &*panels_ : nullptr; }
  void set_panels(const PanelLayout& l) { panels_ = l; }
  // A matmul weight prepared with WeightHints::decode_bound (an f16 classifier keeps the f32 kernels on amx).
  bool decode_bound() const { return decode_bound_; }
  void set_decode_bound() { decode_bound_ = true; }

 private:
  CpuBuffer(void* data, size_t size) : Buffer(size), data_(data) {}
  void* data_;
  std::optional<PanelLayout> panels_;
  bool decode_bound_ = false;
};

// Whether `t`'s buffer was prepared as a decode-bound matmul weight.
inline bool decode_bound(const Tensor& t) {
  const auto* cb = dynamic_cast<const CpuBuffer*>(t.buffer);
  return cb != nullptr && cb->decode_bound();
}

// The layout of the matrix in `t`'s buffer when that buffer was repacked, else null.
const PanelLayout* panel_layout(const Buffer* b);
inline const PanelLayout* panel_layout(const Tensor& t) { return panel_layout(t.buffer); }

// Whether the cpu kernels repack this type with `panel_rows` rows per panel; `amx`: for the amx kernels, which
// also read bf16 panels.
bool repackable(DType type, int panel_rows, bool amx = false);

// Rewrites the matrix `w` (rank 2, the whole of a CpuBuffer at offset 0, a repackable type) into panels of
// `panel_rows` rows, in place, and marks the buffer; a rank-3 `w` [matrices, rows, cols] has each of its matrices
// rewritten so. A matrix with fewer rows than a panel is left as is. The panels are rewritten over `pool`'s threads
// when given (each panel by one thread; the bytes do not depend on the split).
// InvalidArgument when `w` does not qualify (the caller then keeps the row-major layout).
Status repack_matrix(const Tensor& w, int panel_rows, bool amx = false, WorkerPool* pool = nullptr);

// Host memory work of at least this many bytes (zeroing a buffer, an upload's copy, a repack) is split over the
// device's threads.
inline constexpr size_t kParallelHostBytes = size_t{16} << 20;

// The embedding lookup for a repacked table (a tied classifier shares the table): each row's blocks are gathered
// back from the panels, then widened as from a row-major table, so the rows are bit for bit the stored ones.
Status embedding_from_panels(const EmbeddingOp& op);

// FailedPrecondition when an operator would read or write a repacked buffer other than as a matmul's weight or an
// embedding table.
Status check_unpacked_operands(const Op& op);
// FailedPrecondition for a matmul whose kernel build or type cannot read the panels `l` describes.
Status panels_unreadable(const PanelLayout& l);
// FailedPrecondition naming `what` when `b` is repacked (Stream::read / write).
Status check_not_repacked(const Buffer& b, const char* what);

}  // namespace tessera::ops::cpu
