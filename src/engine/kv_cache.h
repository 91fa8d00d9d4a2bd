// The paged KV cache: per-layer K and V tensors of fixed-size blocks, the BlockManager that hands them
// out, and the per-sequence block tables that map positions to blocks; beside it, for hybrid models (Qwen3.5's
// linear-attention layers), a fixed number of recurrent-state slots, one per running sequence: each holds every
// linear layer's convolution window and delta-rule state. Only full-attention layers have K and V.
//
// KvCache owns device memory. BlockManager and SequenceKv are plain values (no device access), so the
// bookkeeping is testable on its own. Thread-safety: owned by the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/block_manager.h"
#include "model/model_config.h"
#include "ops/backend.h"

namespace tessera::engine {

// The KV state of one sequence: how many positions are cached, in which blocks.
struct SequenceKv {
  std::vector<BlockId> blocks;  // block table (BlockId is an int32 enum: the runner uploads it as an i32 tensor)
  int32_t length = 0;           // positions whose K and V are in the cache
  int32_t state_slot = -1;      // hybrid models: the recurrent-state slot this sequence holds (-1: none)
};

struct KvCacheOptions {
  int block_tokens = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;
  bool prefix_cache = true;
  // Hybrid models: recurrent-state slots (sequences that can run at once). 0: one per num_blocks / blocks of a full
  // context is not known here, so the runner sets it (RunnerOptions::max_sequences, or serve's --max-num-seqs).
  int state_slots = 0;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(ops::Device& device, const model::ModelConfig& config,
                                                 const KvCacheOptions& options);

  int block_tokens() const { return options_.block_tokens; }
  int num_blocks() const { return options_.num_blocks; }
  // Device bytes of one block over every layer that holds K and V (a KV-sharing layer holds none).
  size_t bytes_per_block() const { return bytes_per_block_; }
  // A full-attention layer's K and V, [num_blocks, block_tokens, its KV heads, its head size]; an invalid (empty)
  // tensor for a linear-attention layer, which has none; for a gemma4 KV-sharing layer, its source layer's.
  const ops::Tensor& k(int layer) const { return k_[static_cast<size_t>(layer)]; }
  const ops::Tensor& v(int layer) const { return v_[static_cast<size_t>(layer)]; }
  BlockManager& blocks() { return blocks_; }

  // Recurrent state (hybrid models). A linear layer's convolution window [K - 1, channels] and delta-rule state
  // [v_heads, S, S] in `slot`, f32.
  bool has_state() const { return state_slots_ > 0; }
  int state_slots() const { return state_slots_; }
  int free_state_slots() const { return static_cast<int>(free_slots_.size()); }
  size_t state_bytes_per_slot() const { return state_bytes_; }
  ops::Tensor conv_state(int layer, int slot) const;
  ops::Tensor recurrent_state(int layer, int slot) const;

  // Grows seq's block table to hold `new_length` positions and, for a hybrid model, gives a sequence that starts
  // (length 0) a state slot. ResourceExhausted (and no change) when the pool or the slots run dry;
  // FailedPrecondition for a sequence with cached positions but no state (one forked or imported without it).
  Status reserve(SequenceKv& seq, int32_t new_length);
  // Drops seq's references to its blocks (shared or cached blocks live on), frees its state slot, and empties it.
  void release(SequenceKv& seq);

  // Cached blocks the BlockManager evicted (their old contents are still in device memory until something
  // writes them) go to `handler` when flush_evictions() runs: the ModelRunner calls it before every write into
  // the cache (a step, an import), so a KV connector can copy a block out before it is reused. Without a
  // handler, evictions are not recorded.
  using EvictionHandler = std::function<void(std::span<const EvictedBlock>)>;
  void set_eviction_handler(EvictionHandler handler);
  void flush_evictions();

 private:
  explicit KvCache(KvCacheOptions options)
      : options_(options), blocks_(options.num_blocks, options.block_tokens, options.prefix_cache) {}
  KvCacheOptions options_;
  BlockManager blocks_;
  EvictionHandler on_evict_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
  std::vector<ops::Tensor> k_, v_;
  size_t bytes_per_block_ = 0;
  int state_slots_ = 0;
  size_t state_bytes_ = 0;
  std::vector<ops::Tensor> conv_, recurrent_;  // per layer: [slots, K - 1, C], [slots, v_heads, S, S] (linear only)
  std::vector<int32_t> free_slots_;            // a stack: the lowest slot on top
};

}  // namespace tessera::engine
