// The cpu device's buffers and the in-place rewrite of quantised matrices into panels (repack.h has the layout).
// Plain byte moves, compiled once: the panel height is a parameter, so each kernel build asks for its own.
#include "ops/cpu/repack.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>

#include <fmt/core.h>

#include "base/quant.h"

namespace tessera::ops::cpu {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

// A panel block is a list of pieces: `dwords` == 0: the `scalar`-byte value (an f16, or mxfp4's one-byte exponent) at
// block_off of each row, P of them at panel_mult * P; else `dwords` vectors of P dwords at panel_mult * P, vector v
// lane r = the 4 bytes at block_off + 4 v of row r's block, each byte XOR `flip`.
struct Piece {
  int block_off, panel_mult, dwords;
  uint8_t flip;
  int scalar = 2;
};
struct PieceList {
  const Piece* begin_;
  int n;
  const Piece* begin() const { return begin_; }
  const Piece* end() const { return begin_ + n; }
};

PieceList pieces(DType type) {
  static const Piece q4_0[] = {{offsetof(BlockQ4_0, d), 0, 0, 0}, {offsetof(BlockQ4_0, qs), 2, 4, 0}};
  static const Piece q5_0[] = {
      {offsetof(BlockQ5_0, d), 0, 0, 0}, {offsetof(BlockQ5_0, qh), 2, 1, 0}, {offsetof(BlockQ5_0, qs), 6, 4, 0}};
  static const Piece q4_k[] = {{offsetof(BlockQ4_K, d), 0, 0, 0},
                               {offsetof(BlockQ4_K, dmin), 2, 0, 0},
                               {offsetof(BlockQ4_K, scales), 4, 3, 0},
                               {offsetof(BlockQ4_K, qs), 16, 32, 0}};
  static const Piece q5_k[] = {{offsetof(BlockQ5_K, d), 0, 0, 0},
                               {offsetof(BlockQ5_K, dmin), 2, 0, 0},
                               {offsetof(BlockQ5_K, scales), 4, 3, 0},
                               {offsetof(BlockQ5_K, qh), 16, 8, 0},
                               {offsetof(BlockQ5_K, qs), 48, 32, 0}};
  static const Piece pair[] = {{0, 0, 1, 0}};  // bf16 / f16: a "block" is a pair of elements, one dword
  static const Piece q6_k[] = {{offsetof(BlockQ6_K, d), 0, 0, 0},
                               {offsetof(BlockQ6_K, scales), 2, 4, 0},
                               {offsetof(BlockQ6_K, ql), 18, 32, 0},
                               {offsetof(BlockQ6_K, qh), 146, 16, 0}};
  static const Piece q2_k[] = {{offsetof(BlockQ2_K, d), 0, 0, 0},
                               {offsetof(BlockQ2_K, dmin), 2, 0, 0},
                               {offsetof(BlockQ2_K, scales), 4, 4, 0},
                               {offsetof(BlockQ2_K, qs), 20, 16, 0}};
  static const Piece q3_k[] = {{offsetof(BlockQ3_K, d), 0, 0, 0},
                               {offsetof(BlockQ3_K, scales), 2, 3, 0},
                               {offsetof(BlockQ3_K, hmask), 14, 8, 0},
                               {offsetof(BlockQ3_K, qs), 46, 16, 0}};
  static const Piece q4_1[] = {
      {offsetof(BlockQ4_1, d), 0, 0, 0}, {offsetof(BlockQ4_1, m), 2, 0, 0}, {offsetof(BlockQ4_1, qs), 4, 4, 0}};
  static const Piece q5_1[] = {{offsetof(BlockQ5_1, d), 0, 0, 0},
                               {offsetof(BlockQ5_1, m), 2, 0, 0},
                               {offsetof(BlockQ5_1, qh), 4, 1, 0},
                               {offsetof(BlockQ5_1, qs), 8, 4, 0}};
  static const Piece mxfp4[] = {{offsetof(BlockMXFP4, e), 0, 0, 0, 1}, {offsetof(BlockMXFP4, qs), 1, 4, 0}};
  switch (type) {
    case DType::kQ4_0:
      return {q4_0, 2};
    case DType::kMXFP4:
      return {mxfp4, 2};
    case DType::kQ4_1:
      return {q4_1, 3};
    case DType::kQ5_1:
      return {q5_1, 4};
    case DType::kQ2_K:
      return {q2_k, 4};
    case DType::kQ3_K:
      return {q3_k, 4};
    case DType::kBF16:
    case DType::kF16:
      return {pair, 1};
    case DType::kQ5_0:
      return {q5_0, 3};
    case DType::kQ4_K:
      return {q4_k, 4};
    case DType::kQ5_K:
      return {q5_k, 5};
    case DType::kQ6_K:
      return {q6_k, 4};
    default:
      return {nullptr, 0};  // repackable() keeps other types away
  }
}

// One panel block from the P row blocks (type layouts: base/quant.h; target layout: repack.h).
void panel_block(DType type, const uint8_t* const* blocks, int p, uint8_t* dst) {
  for (const Piece& pc : pieces(type)) {
    uint8_t* o = dst + pc.panel_mult * p;
    if (pc.dwords == 0) {
      for (int r = 0; r < p; ++r) std::memcpy(o + pc.scalar * r, blocks[r] + pc.block_off, pc.scalar);
      continue;
    }
    // A dword at a time (the flip in each of its bytes): the byte loop made the 8B model's load repack-bound.
    const uint32_t flip = pc.flip * 0x01010101u;
    for (int v = 0; v < pc.dwords; ++v)
      for (int r = 0; r < p; ++r, o += 4) {
        uint32_t d;
        std::memcpy(&d, blocks[r] + pc.block_off + 4 * v, 4);
        d ^= flip;
        std::memcpy(o, &d, 4);
      }
  }
}

// Row r (lane) of one panel block back into its stored block bytes: panel_block's inverse.
void row_block(DType type, const uint8_t* pb, int p, int r, uint8_t* block) {
  for (const Piece& pc : pieces(type)) {
    const uint8_t* o = pb + pc.panel_mult * p;
    if (pc.dwords == 0) {
      std::memcpy(block + pc.block_off, o + pc.scalar * r, pc.scalar);
      continue;
    }
    for (int v = 0; v < pc.dwords; ++v)
      for (int b = 0; b < 4; ++b) block[pc.block_off + 4 * v + b] = o[(v * p + r) * 4 + b] ^ pc.flip;
  }
}

static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_1) == 24 && sizeof(BlockMXFP4) == 17 &&
                  sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "the panel offsets above follow these sizes");

// The unit a panel block covers: the type's block, or for bf16 and f16 a pair of elements (4 bytes).
struct Blocking {
  int64_t elems;
  size_t bytes;
};
Blocking blocking(DType type) {
  if (type == DType::kBF16 || type == DType::kF16) return {2, 4};
  const DTypeInfo& info = dtype_info(type);
  return {info.block_elems, static_cast<size_t>(info.block_bytes)};
}

// bf16 / f16 for the avx512 kernels (repack.h): lane r of element j's vector in a panel of p rows.
void dense_panel(const uint16_t* rows, int64_t cols, int p, uint16_t* panel) {
  for (int r = 0; r < p; ++r) {
    const uint16_t* src = rows + r * cols;
    for (int64_t j = 0; j < cols; ++j) panel[j * p + r] = src[j];
  }
}

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

Result<std::unique_ptr<Buffer>> CpuBuffer::create(size_t bytes, WorkerPool* pool) {
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : kAlignment;
  const size_t rounded = std::max(align, (bytes + align - 1) / align * align);
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) return resource_exhausted(fmt::format("cpu: cannot allocate {} bytes of host memory", bytes));
  // Transparent huge pages where the kernel offers them on request (THP "madvise", Debian's default): a decode
  // step streams every weight once, and with 4 KiB pages each 4 KiB of it costs a TLB miss.
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);
  if (pool != nullptr && huge) {
    const int64_t pages = static_cast<int64_t>(rounded / kHugePage);  // huge: rounded is whole 2 MiB pages
    parallel_for(pool, pages, [&](int64_t i) { std::memset(static_cast<uint8_t*>(p) + i * kHugePage, 0, kHugePage); });
  } else {
    std::memset(p, 0, rounded);
  }
  return std::unique_ptr<Buffer>(new CpuBuffer(p, bytes));
}

CpuBuffer::~CpuBuffer() { std::free(data_); }

const PanelLayout* panel_layout(const Buffer* b) {
  const auto* cb = dynamic_cast<const CpuBuffer*>(b);
  return cb ? cb->panels() : nullptr;
}

bool repackable(DType type, int panel_rows, bool amx) {
  if (panel_rows != 8 && panel_rows != 16) return false;
  switch (type) {
    case DType::kBF16:
    case DType::kF16:
      return !amx || panel_rows == 16;  // amx: pairs for its tiles; avx512 / avx2: one element per vector
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return true;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kMXFP4:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
      return !amx;  // the amx build reads these row-major (its tiles have no panel reader for them)
    default:
      return false;
  }
}

Status repack_matrix(const Tensor& w, int panel_rows, bool amx, WorkerPool* pool) {
  auto* buf = dynamic_cast<CpuBuffer*>(w.buffer);
  if (buf == nullptr) return invalid_argument("repack: not a cpu buffer");
  if (buf->panels() != nullptr) return invalid_argument("repack: the buffer is already repacked");
  if ((w.rank != 2 && w.rank != 3) || w.offset != 0 || w.bytes() != buf->size())
    return invalid_argument("repack: the matrix (or stack of matrices) must be the whole of its buffer");
  if (!repackable(w.dtype, panel_rows, amx))
    return invalid_argument(
        fmt::format("repack: {} is not repacked for panels of {}", dtype_name(w.dtype), panel_rows));
  const Blocking info = blocking(w.dtype);
  const int64_t matrices = w.rank == 3 ? w.dim(0) : 1, rows = w.dim(w.rank - 2), cols = w.dim(w.rank - 1);
  const bool dense = w.dtype == DType::kBF16 || w.dtype == DType::kF16;
  // amx: dense rows of whole 32-element tile steps only (the tiles then read the panels as they are); others stay
  // row-major and unmarked, and the kernels lay them out per call.
  const bool pairs = dense && amx;  // avx512: one element per vector (repack.h)
  if (dense && amx && cols % 32 != 0) return ok_status();
  if (!dense && cols % info.elems != 0) return invalid_argument("repack: rows are not whole blocks");
  if (rows < panel_rows) return ok_status();  // nothing to gain; stays row-major and unmarked
  // Every whole panel of every matrix, in place through a copy of its row-major bytes; over the pool's threads for a
  // large matrix (each panel is rewritten by one of them).
  const int64_t panels = rows / panel_rows, total = matrices * panels;
  if (dense && !pairs) {
    const size_t panel_elems = static_cast<size_t>(panel_rows * cols);
    parallel_for(pool, total, [&](int64_t i) {
      thread_local std::vector<uint16_t> copy;
      copy.resize(panel_elems);
      const int64_t m = i / panels, p = i % panels;
      uint16_t* panel = static_cast<uint16_t*>(buf->host_ptr()) + static_cast<size_t>(m * rows * cols) +
                        static_cast<size_t>(p) * panel_elems;
      std::memcpy(copy.data(), panel, panel_elems * sizeof(uint16_t));
      dense_panel(copy.data(), cols, panel_rows, panel);
    });
    buf->set_panels(PanelLayout{w.dtype, rows, cols, panel_rows, matrices, false});
    return ok_status();
  }
  const int64_t nb = cols / info.elems;
  const size_t bs = info.bytes, panel_bytes = static_cast<size_t>(panel_rows * nb) * bs;
  const size_t matrix_bytes = static_cast<size_t>(rows * nb) * bs;
  parallel_for(pool, total, [&](int64_t i) {
    thread_local std::vector<uint8_t> rows_copy;  // one panel's row-major blocks: the rewrite is in place
    rows_copy.resize(panel_bytes);
    const uint8_t* blocks[16];
    const int64_t m = i / panels, p = i % panels;
    uint8_t* panel = static_cast<uint8_t*>(buf->host_ptr()) + static_cast<size_t>(m) * matrix_bytes +
                     static_cast<size_t>(p) * panel_bytes;
    std::memcpy(rows_copy.data(), panel, panel_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < panel_rows; ++r) blocks[r] = rows_copy.data() + (static_cast<size_t>(r * nb + b)) * bs;
      panel_block(w.dtype, blocks, panel_rows, panel + static_cast<size_t>(b * panel_rows) * bs);
    }
  });
  buf->set_panels(PanelLayout{w.dtype, rows, cols, panel_rows, matrices, pairs});
  return ok_status();
}

Status embedding_from_panels(const EmbeddingOp& op) {
  const PanelLayout* l = panel_layout(op.table);
  const int64_t vocab = op.table.dim(0), dim = op.table.dim(1);
  if (l == nullptr || op.table.offset != 0 || l->matrices != 1 || l->type != op.table.dtype || l->rows != vocab ||
      l->cols != dim) {
    return failed_precondition("cpu embedding: the table's panel layout does not describe it");
  }
  const Blocking info = blocking(l->type);
  const int64_t nb = dim / info.elems, p = l->panel_rows, whole = l->whole_panels();
  const size_t bs = info.bytes, row_bytes = static_cast<size_t>(nb) * bs;
  const auto* base = static_cast<const uint8_t*>(op.table.buffer->host_ptr());
  const auto* ids = static_cast<const int32_t*>(op.ids.buffer->host_ptr()) + op.ids.offset / sizeof(int32_t);
  auto* out0 = reinterpret_cast<float*>(static_cast<uint8_t*>(op.out.buffer->host_ptr()) + op.out.offset);
  std::vector<uint8_t> row(row_bytes);
  for (int64_t i = 0; i < op.ids.dim(0); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab) {
      return out_of_range(fmt::format("embedding: token id {} is outside the vocabulary [0, {})", id, vocab));
    }
    const uint8_t* src = base + static_cast<size_t>(id) * row_bytes;  // a row-major tail row
    const bool dense = l->type == DType::kBF16 || l->type == DType::kF16;
    if (id < whole * p && dense && !l->pairs) {
      const auto* panel = reinterpret_cast<const uint16_t*>(base) + static_cast<size_t>(id / p * p * dim);
      auto* dst = reinterpret_cast<uint16_t*>(row.data());
      for (int64_t j = 0; j < dim; ++j) dst[j] = panel[j * p + id % p];
      src = row.data();
    } else if (id < whole * p) {
      const int64_t panel = id / p;
      for (int64_t b = 0; b < nb; ++b)
        row_block(l->type, base + static_cast<size_t>(panel * nb + b) * static_cast<size_t>(p) * bs,
                  static_cast<int>(p), static_cast<int>(id % p), row.data() + static_cast<size_t>(b) * bs);
      src = row.data();
    }
    float* out = out0 + i * dim;
    TS_RETURN_IF_ERROR(dequantize(src, l->type, {out, static_cast<size_t>(dim)}));
    if (op.scale != 1.0f)
      for (int64_t j = 0; j < dim; ++j) out[j] *= op.scale;
  }
  return ok_status();
}

Status panels_unreadable(const PanelLayout& l) {
  return failed_precondition(
      fmt::format("cpu matmul: this kernel build does not read {} weights repacked in panels of {} rows",
                  dtype_name(l.type), l.panel_rows));
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
          any(o.ids, o.out);  // a repacked table is read through embedding_from_panels
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          any(o.x, o.weight, o.out);
        } else if constexpr (std::is_same_v<T, AddRmsNormOp>) {
          any(o.residual, o.delta, o.weight, o.out);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          any(o.q, o.k, o.positions, o.freqs);
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          any(o.k, o.v, o.k_cache, o.v_cache, o.slots);
        } else if constexpr (std::is_same_v<T, AttentionPrefillOp>) {
          any(o.q, o.k_cache, o.v_cache, o.block_table, o.out, o.sinks);
        } else if constexpr (std::is_same_v<T, AttentionDecodeOp>) {
          any(o.q, o.k_cache, o.v_cache, o.block_tables, o.context_lens, o.out, o.sinks);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          any(o.x, o.out, o.bias);  // the weight is what the layout is for
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          any(o.gate, o.up, o.out);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          any(o.a, o.b, o.out);
        } else if constexpr (std::is_same_v<T, SoftmaxOp>) {
          any(o.x, o.out);
        } else if constexpr (std::is_same_v<T, LayerNormOp>) {
          any(o.x, o.weight, o.bias, o.out);
        } else if constexpr (std::is_same_v<T, AttentionNonCausalOp>) {
          any(o.q, o.k, o.v, o.out);
        } else if constexpr (std::is_same_v<T, ArgmaxOp> || std::is_same_v<T, ActivationOp> ||
                             std::is_same_v<T, PoolOp> || std::is_same_v<T, ScaleOp>) {
          any(o.x, o.out);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          any(o.logits, o.ids, o.weights, o.bias, o.expert_scale);
        } else if constexpr (std::is_same_v<T, SplitHeadsOp>) {
          any(o.x, o.a, o.b);
        } else if constexpr (std::is_same_v<T, CausalConv1dOp>) {
          any(o.x, o.weight, o.state, o.out);
        } else if constexpr (std::is_same_v<T, GatedDeltaRuleOp>) {
          any(o.qkv, o.alpha, o.beta, o.dt_bias, o.a, o.state, o.out);
        } else {
          static_assert(std::is_same_v<T, MoeExpertsOp>, "every operator lists its tensors here");
          any(o.x, o.ids, o.weights, o.out, o.gate_bias, o.up_bias, o.down_bias);  // the experts may be panels
        }
        return bad ? refuse(op_name(Op{o})) : ok_status();
      },
      op);
}

}  // namespace tessera::ops::cpu
