// The cpu device's buffers and the in-place rewrite of quantised matrices into panels (repack.h has the layout).
// Plain byte moves, compiled once: the panel height is a parameter, so each kernel build asks for its own.
#include "ops/cpu/repack.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "base/quant.h"

namespace tessera::ops::cpu {
namespace {

constexpr size_t kAlignment = 64;

// Writes, for v in [0, vectors), vector v of P dwords: lane r = the 4 bytes at src_off + 4 v of row r's block,
// each byte XOR `flip`.
void interleave(const uint8_t* const* blocks, int p, int src_off, int vectors, uint8_t flip, uint8_t* dst) {
  for (int v = 0; v < vectors; ++v)
    for (int r = 0; r < p; ++r)
      for (int b = 0; b < 4; ++b) *dst++ = blocks[r][src_off + 4 * v + b] ^ flip;
}
// P f16 values at src_off of each row's block.
void halves(const uint8_t* const* blocks, int p, int src_off, uint8_t* dst) {
  for (int r = 0; r < p; ++r) {
    std::memcpy(dst, blocks[r] + src_off, 2);
    dst += 2;
  }
}

// One panel block from the P row blocks (type layouts: base/quant.h; target layout: repack.h).
void panel_block(DType type, const uint8_t* const* blocks, int p, uint8_t* dst) {
  switch (type) {
    case DType::kQ4_0:
      halves(blocks, p, offsetof(BlockQ4_0, d), dst);
      interleave(blocks, p, offsetof(BlockQ4_0, qs), 4, 0, dst + 2 * p);
      return;
    case DType::kQ5_0:
      halves(blocks, p, offsetof(BlockQ5_0, d), dst);
      interleave(blocks, p, offsetof(BlockQ5_0, qh), 1, 0, dst + 2 * p);
      interleave(blocks, p, offsetof(BlockQ5_0, qs), 4, 0, dst + 6 * p);
      return;
    case DType::kQ8_0:
      halves(blocks, p, offsetof(BlockQ8_0, d), dst);
      interleave(blocks, p, offsetof(BlockQ8_0, qs), 8, 0x80, dst + 2 * p);
      return;
    case DType::kQ4_K:
      halves(blocks, p, offsetof(BlockQ4_K, d), dst);
      halves(blocks, p, offsetof(BlockQ4_K, dmin), dst + 2 * p);
      interleave(blocks, p, offsetof(BlockQ4_K, scales), 3, 0, dst + 4 * p);
      interleave(blocks, p, offsetof(BlockQ4_K, qs), 32, 0, dst + 16 * p);
      return;
    case DType::kQ6_K:
      halves(blocks, p, offsetof(BlockQ6_K, d), dst);
      interleave(blocks, p, offsetof(BlockQ6_K, scales), 4, 0, dst + 2 * p);
      interleave(blocks, p, offsetof(BlockQ6_K, ql), 32, 0, dst + 18 * p);
      interleave(blocks, p, offsetof(BlockQ6_K, qh), 16, 0, dst + 146 * p);
      return;
    default:
      return;  // repackable() keeps other types away
  }
}
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210, "the panel offsets above follow these sizes");

template <typename T>
bool packed_in(const T& t) {
  const PanelLayout* l = panel_layout(t.buffer);
  return l != nullptr;
}

Status refuse(std::string_view op) {
  return failed_precondition(
      fmt::format("cpu {}: an operand is a weight matrix repacked for the cpu matmul kernels; only a matmul may read "
                  "it, as its weight",
                  op));
}

}  // namespace

Result<std::unique_ptr<Buffer>> CpuBuffer::create(size_t bytes) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return resource_exhausted(fmt::format("cpu: cannot allocate {} bytes of host memory", bytes));
  std::memset(p, 0, rounded);
  return std::unique_ptr<Buffer>(new CpuBuffer(p, bytes));
}

CpuBuffer::~CpuBuffer() { std::free(data_); }

const PanelLayout* panel_layout(const Buffer* b) {
  const auto* cb = dynamic_cast<const CpuBuffer*>(b);
  return cb ? cb->panels() : nullptr;
}

bool repackable(DType type, int panel_rows) {
  if (panel_rows != 8 && panel_rows != 16) return false;
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return true;
    case DType::kQ8_0:
      // Unsigned q + 128 against signed activations: vpdpbusd sums in int32 (avx512); avx2's maddubs would
      // saturate its int16 pairs, so the avx2 build keeps q8_0 row-major.
      return panel_rows == 16;
    default:
      return false;
  }
}

Status repack_matrix(const Tensor& w, int panel_rows) {
  auto* buf = dynamic_cast<CpuBuffer*>(w.buffer);
  if (buf == nullptr) return invalid_argument("repack: not a cpu buffer");
  if (buf->panels() != nullptr) return invalid_argument("repack: the buffer is already repacked");
  if (w.rank != 2 || w.offset != 0 || w.bytes() != buf->size())
    return invalid_argument("repack: the matrix must be the whole of its buffer");
  if (!repackable(w.dtype, panel_rows))
    return invalid_argument(
        fmt::format("repack: {} is not repacked for panels of {}", dtype_name(w.dtype), panel_rows));
  const DTypeInfo& info = dtype_info(w.dtype);
  const int64_t rows = w.dim(0), cols = w.dim(1);
  if (cols % info.block_elems != 0) return invalid_argument("repack: rows are not whole blocks");
  if (rows < panel_rows) return ok_status();  // nothing to gain; stays row-major and unmarked
  const int64_t nb = cols / info.block_elems;
  const size_t bs = static_cast<size_t>(info.block_bytes), panel_bytes = static_cast<size_t>(panel_rows * nb) * bs;
  auto* base = static_cast<uint8_t*>(buf->host_ptr());
  std::vector<uint8_t> rows_copy(panel_bytes);  // one panel's row-major blocks: the rewrite is in place
  std::vector<const uint8_t*> blocks(static_cast<size_t>(panel_rows));
  for (int64_t p = 0; p < rows / panel_rows; ++p) {
    uint8_t* panel = base + static_cast<size_t>(p) * panel_bytes;
    std::memcpy(rows_copy.data(), panel, panel_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < panel_rows; ++r)
        blocks[static_cast<size_t>(r)] = rows_copy.data() + (static_cast<size_t>(r * nb + b)) * bs;
      panel_block(w.dtype, blocks.data(), panel_rows, panel + static_cast<size_t>(b * panel_rows) * bs);
    }
  }
  buf->set_panels(PanelLayout{w.dtype, rows, cols, panel_rows});
  return ok_status();
}

Status check_not_repacked(const Buffer& b, const char* what) {
  if (panel_layout(&b) == nullptr) return ok_status();
  return failed_precondition(
      fmt::format("cpu stream {}: the buffer holds a weight matrix repacked for the cpu matmul kernels; its bytes "
                  "are not in the layout it was uploaded in",
                  what));
}

Status check_unpacked_operands(const Op& op) {
  return std::visit(
      [](const auto& o) -> Status {
        using T = std::decay_t<decltype(o)>;
        bool bad = false;
        auto any = [&bad](const auto&... t) { bad = (packed_in(t) || ...); };
        if constexpr (std::is_same_v<T, EmbeddingOp>) {
          any(o.table, o.ids, o.out);
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          any(o.x, o.weight, o.out);
        } else if constexpr (std::is_same_v<T, AddRmsNormOp>) {
          any(o.residual, o.delta, o.weight, o.out);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          any(o.q, o.k, o.positions, o.freqs);
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          any(o.k, o.v, o.k_cache, o.v_cache, o.slots);
        } else if constexpr (std::is_same_v<T, AttentionPrefillOp>) {
          any(o.q, o.k_cache, o.v_cache, o.block_table, o.out);
        } else if constexpr (std::is_same_v<T, AttentionDecodeOp>) {
          any(o.q, o.k_cache, o.v_cache, o.block_tables, o.context_lens, o.out);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          any(o.x, o.out, o.bias);  // the weight is what the layout is for
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          any(o.gate, o.up, o.out);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          any(o.a, o.b, o.out);
        } else if constexpr (std::is_same_v<T, SoftmaxOp>) {
          any(o.x, o.out);
        } else {
          static_assert(std::is_same_v<T, ArgmaxOp>, "every operator lists its tensors here");
          any(o.x, o.out);
        }
        return bad ? refuse(op_name(Op{o})) : ok_status();
      },
      op);
}

}  // namespace tessera::ops::cpu
