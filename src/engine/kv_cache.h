// The paged KV cache: per-layer K and V tensors of fixed-size blocks, a block allocator, and the
// per-sequence block tables that map positions to blocks.
//
// KvCache owns device memory. BlockAllocator and SequenceKv are plain values (no device access), so
// the bookkeeping is testable on its own. Thread-safety: owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "model/model_config.h"
#include "ops/backend.h"

namespace tessera::engine {

enum class BlockId : int32_t {};

// Hands out block ids from a fixed pool (LIFO, so recently freed and still cache-warm blocks come first).
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  // ResourceExhausted when every block is in use.
  Result<BlockId> allocate();
  void release(BlockId id);  // releasing a block that is not allocated is a broken invariant
  int free_count() const { return static_cast<int>(free_.size()); }
  int num_blocks() const { return num_blocks_; }

 private:
  int num_blocks_;
  std::vector<BlockId> free_;
  std::vector<bool> in_use_;
};

// The KV state of one sequence: how many positions are cached, in which blocks.
struct SequenceKv {
  std::vector<int32_t> blocks;  // block table (int32: it is uploaded as an i32 tensor)
  int32_t length = 0;           // positions whose K and V are in the cache
};

struct KvCacheOptions {
  int block_tokens = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;
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
  BlockAllocator& allocator() { return allocator_; }

  // Grows seq's block table to hold `new_length` positions. ResourceExhausted (and no change) when the
  // pool runs dry.
  Status reserve(SequenceKv& seq, int32_t new_length);
  // Returns seq's blocks to the pool and empties it.
  void release(SequenceKv& seq);

 private:
  KvCache(KvCacheOptions options) : options_(options), allocator_(options.num_blocks) {}
  KvCacheOptions options_;
  BlockAllocator allocator_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
  std::vector<ops::Tensor> k_, v_;
};

}  // namespace tessera::engine
