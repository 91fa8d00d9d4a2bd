// The paged KV cache: per-layer K and V tensors of fixed-size blocks, the BlockManager that hands them
// out, and the per-sequence block tables that map positions to blocks.
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
};

struct KvCacheOptions {
  int block_tokens = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;
  bool prefix_cache = true;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(ops::Device& device, const model::ModelConfig& config,
                                                 const KvCacheOptions& options);

  int block_tokens() const { return options_.block_tokens; }
  int num_blocks() const { return options_.num_blocks; }
  size_t bytes_per_block() const;
  const ops::Tensor& k(int layer) const { return k_[static_cast<size_t>(layer)]; }
  const ops::Tensor& v(int layer) const { return v_[static_cast<size_t>(layer)]; }
  BlockManager& blocks() { return blocks_; }

  // Grows seq's block table to hold `new_length` positions. ResourceExhausted (and no change) when the
  // pool runs dry.
  Status reserve(SequenceKv& seq, int32_t new_length);
  // Drops seq's references to its blocks (shared or cached blocks live on) and empties it.
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
};

}  // namespace tessera::engine
