// Kernels of the cpu backend. Every kernel source is compiled three times: with AVX-512 F/BW/VL/VNNI on
// top of AVX2/FMA/F16C (namespace cpu::avx512), with AVX2/FMA/F16C (cpu::avx2), and for baseline x86-64
// (cpu::generic); the matmul sources a fourth time with the AVX-512 flags plus AMX-TILE/INT8/BF16 (cpu::amx:
// its other operators are the avx512 ones), and a fifth with the AVX-512 flags plus AVX512-BF16 and no AMX
// (cpu::amx_emulated: the amx build's kernels with each tile instruction carried out in software, amx_tiles.h, so
// that they are tested on processors without tiles). cpu_backend.cc picks one at run time from what the processor
// reports (or what --cpu-isa / TESSERA_CPU_ISA forces). Inside a kernel file `#if defined(__AVX2__)` selects
// the intrinsic paths, `#if defined(__AVX512VNNI__)` the VNNI instructions and `#if defined(TS_AMX_TILES)` the
// tiles (both tile builds), so every build comes from one source and each variant is compiled and tested.
//
// Inputs have passed ops::validate() and the device's supports(); data-dependent checks (ids, slots,
// block numbers in range) are done here and return OutOfRange. Kernels split work over the stream's
// WorkerPool (worker_pool.h) with parallel_for().
#pragma once

// The two builds with tiles: the amx one (the tile unit) and amx_emulated (TS_AMX_EMULATED, set by CMake).
#if (defined(__AMX_INT8__) && defined(__AMX_BF16__)) || defined(TS_AMX_EMULATED)
#define TS_AMX_TILES 1
#endif

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/cpu/worker_pool.h"
#include "ops/ops.h"

namespace tessera::ops::cpu {

struct Ctx {
  int threads = 1;
  WorkerPool* pool = nullptr;  // the stream's threads; null: run inline
};

// Whether weight streams are prefetched kFarPrefetchBytes ahead into L2 (rather than near into L1, or left to the
// hardware prefetcher): the dense decode rows on AMD processors (matmul_dense.cc says why), the k-quant panels on AMD
// processors before family 1Ah (Zen 5), which stream them faster with the near L1 prefetch (matmul_repacked.h).
// Asked of the processor once.
bool prefetch_far_to_l2();
bool prefetch_panels_far_to_l2();
constexpr int kFarPrefetchBytes = 16384;

// How the one- and two-row (decode) matmuls walk a repacked k-quant matrix (matmul_repacked.h): kPairs, two panels
// half a matrix apart in lockstep (two streams a thread); kOne, one panel after another with the prefetch
// kOneStreamPrefetchBytes ahead (one stream a thread). Asked of the processor once: kOne on AMD family 1Ah (Zen 5)
// and later, where it was measured the faster; kPairs elsewhere. The bits do not depend on it.
enum class PanelWalk : uint8_t { kPairs, kOne };
PanelWalk kquant_decode_walk();
// Tests run both walks on any processor: pin one, or give the choice back to the processor (nullopt).
void pin_kquant_decode_walk(std::optional<PanelWalk> walk);
constexpr int kOneStreamPrefetchBytes = 8192;

// fn(i) for i in [0, n) on the stream's threads; inline when n * work_per_item < min_work.
template <typename F>
void parallel_for(const Ctx& ctx, int64_t n, F&& fn, double work_per_item = 1.0, double min_work = 0.0) {
  parallel_for(ctx.pool, n, std::forward<F>(fn), work_per_item, min_work);
}

// fn(block, item) for every block in [0, blocks) and item in [0, items), in one parallel region: each chunk of
// consecutive items runs block by block (all its items for block 0, then block 1, ...). That keeps the cache use of
// `for each block: parallel_for(items)` (a block of activation rows hot while a chunk's weight panels pass) with
// one fork and join instead of one per block: on a shared machine every join waits for the slowest thread's
// time slice (F16 prefill of 512 tokens: 6 joins per matmul, 500 per prompt). work_per_item is per (block, item).
template <typename F>
void parallel_for_blocks(const Ctx& ctx, int64_t items, int64_t blocks, F&& fn, double work_per_item = 1.0,
                         double min_work = 0.0) {
  const int threads = ctx.pool ? ctx.pool->threads() : 1;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(items, static_cast<int64_t>(threads) * 4));
  parallel_for(
      ctx, chunks,
      [&](int64_t c) {
        const int64_t i0 = items * c / chunks, i1 = items * (c + 1) / chunks;
        for (int64_t b = 0; b < blocks; ++b)
          for (int64_t i = i0; i < i1; ++i) fn(b, i);
      },
      work_per_item * static_cast<double>(blocks) * static_cast<double>(items) / static_cast<double>(chunks), min_work);
}

template <typename T>
T* data(const Tensor& t) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(t.buffer->host_ptr()) + t.offset);
}

#define TS_CPU_DECLARE_KERNELS(ns)                                              \
  namespace ns {                                                                \
  Status embedding(const EmbeddingOp& op, const Ctx& ctx);                      \
  Status rms_norm(const RmsNormOp& op, const Ctx& ctx);                         \
  Status add_rms_norm(const AddRmsNormOp& op, const Ctx& ctx);                  \
  Status rope(const RopeOp& op, const Ctx& ctx);                                \
  Status kv_write(const KvWriteOp& op, const Ctx& ctx);                         \
  Status attention_prefill(const AttentionPrefillOp& op, const Ctx& ctx);       \
  Status attention_decode(const AttentionDecodeOp& op, const Ctx& ctx);         \
  Status attention_prefill_quant(const AttentionPrefillOp& op, const Ctx& ctx); \
  Status attention_decode_quant(const AttentionDecodeOp& op, const Ctx& ctx);   \
  Status matmul_dense(const MatMulOp& op, const Ctx& ctx);                      \
  Status matmul_quant(const MatMulOp& op, const Ctx& ctx);                      \
  Status matmul_kquant(const MatMulOp& op, const Ctx& ctx);                     \
  Status silu_mul(const SiluMulOp& op, const Ctx& ctx);                         \
  Status add(const AddOp& op, const Ctx& ctx);                                  \
  Status scale(const ScaleOp& op, const Ctx& ctx);                              \
  Status softmax(const SoftmaxOp& op, const Ctx& ctx);                          \
  Status argmax(const ArgmaxOp& op, const Ctx& ctx);                            \
  Status layer_norm(const LayerNormOp& op, const Ctx& ctx);                     \
  Status activation(const ActivationOp& op, const Ctx& ctx);                    \
  Status attention_noncausal(const AttentionNonCausalOp& op, const Ctx& ctx);   \
  Status pool(const PoolOp& op, const Ctx& ctx);                                \
  Status moe_route(const MoeRouteOp& op, const Ctx& ctx);                       \
  Status moe_experts(const MoeExpertsOp& op, const Ctx& ctx);                   \
  Status split_heads(const SplitHeadsOp& op, const Ctx& ctx);                   \
  Status causal_conv1d(const CausalConv1dOp& op, const Ctx& ctx);               \
  Status gated_delta_rule(const GatedDeltaRuleOp& op, const Ctx& ctx);          \
  }

namespace amx {
Status matmul_dense(const MatMulOp& op, const Ctx& ctx);
Status matmul_quant(const MatMulOp& op, const Ctx& ctx);
Status matmul_kquant(const MatMulOp& op, const Ctx& ctx);
Status moe_route(const MoeRouteOp& op, const Ctx& ctx);
Status moe_experts(const MoeExpertsOp& op, const Ctx& ctx);
}  // namespace amx
namespace amx_emulated {
Status matmul_dense(const MatMulOp& op, const Ctx& ctx);
Status matmul_quant(const MatMulOp& op, const Ctx& ctx);
Status matmul_kquant(const MatMulOp& op, const Ctx& ctx);
Status moe_route(const MoeRouteOp& op, const Ctx& ctx);
Status moe_experts(const MoeExpertsOp& op, const Ctx& ctx);
}  // namespace amx_emulated
TS_CPU_DECLARE_KERNELS(avx512)
TS_CPU_DECLARE_KERNELS(avx2)
TS_CPU_DECLARE_KERNELS(generic)

}  // namespace tessera::ops::cpu
