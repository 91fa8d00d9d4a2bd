#include "engine/kv_cache.h"

#include <fmt/core.h>

#include "base/check.h"

namespace tessera::engine {

BlockAllocator::BlockAllocator(int num_blocks) : num_blocks_(num_blocks), in_use_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(static_cast<BlockId>(i));
}

Result<BlockId> BlockAllocator::allocate() {
  if (free_.empty()) return resource_exhausted(fmt::format("all {} KV blocks are in use", num_blocks_));
  BlockId id = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(id)] = true;
  return id;
}

void BlockAllocator::release(BlockId id) {
  auto i = static_cast<size_t>(id);
  TS_CHECK(i < in_use_.size() && in_use_[i]);
  in_use_[i] = false;
  free_.push_back(id);
}

Result<std::unique_ptr<KvCache>> KvCache::create(ops::Device& device, const model::ModelConfig& config,
                                                 const KvCacheOptions& options) {
  if (options.block_tokens <= 0 || options.num_blocks <= 0) {
    return invalid_argument(fmt::format("KV cache needs positive block_tokens and num_blocks (got {} and {})",
                                        options.block_tokens, options.num_blocks));
  }
  std::unique_ptr<KvCache> cache(new KvCache(options));
  for (int l = 0; l < config.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      ops::Tensor t(nullptr, 0, options.dtype,
                    {options.num_blocks, options.block_tokens, config.n_kv_heads, config.head_dim});
      TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device.alloc(t.bytes()));
      t.buffer = buf.get();
      cache->buffers_.push_back(std::move(buf));
      (kv == 0 ? cache->k_ : cache->v_).push_back(t);
    }
  }
  return cache;
}

size_t KvCache::bytes_per_block() const { return k_.empty() ? 0 : 2 * k_.size() * k_[0].row_bytes(); }

Status KvCache::reserve(SequenceKv& seq, int32_t new_length) {
  size_t need = (static_cast<size_t>(new_length) + options_.block_tokens - 1) / options_.block_tokens;
  size_t had = seq.blocks.size();
  while (seq.blocks.size() < need) {
    auto id = allocator_.allocate();
    if (!id.ok()) {
      while (seq.blocks.size() > had) {
        allocator_.release(static_cast<BlockId>(seq.blocks.back()));
        seq.blocks.pop_back();
      }
      return id.status();
    }
    seq.blocks.push_back(static_cast<int32_t>(*id));
  }
  return ok_status();
}

void KvCache::release(SequenceKv& seq) {
  for (int32_t b : seq.blocks) allocator_.release(static_cast<BlockId>(b));
  seq.blocks.clear();
  seq.length = 0;
}

}  // namespace tessera::engine
