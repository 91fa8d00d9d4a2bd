#include "engine/kv_cache.h"

#include <fmt/core.h>

namespace tessera::engine {

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
    auto id = blocks_.allocate();
    if (!id.ok()) {
      while (seq.blocks.size() > had) {
        blocks_.release(seq.blocks.back());
        seq.blocks.pop_back();
      }
      return id.status();
    }
    seq.blocks.push_back(*id);
  }
  return ok_status();
}

void KvCache::release(SequenceKv& seq) {
  for (BlockId b : seq.blocks) blocks_.release(b);
  seq.blocks.clear();
  seq.length = 0;
}

void KvCache::set_eviction_handler(EvictionHandler handler) {
  on_evict_ = std::move(handler);
  blocks_.track_evictions(static_cast<bool>(on_evict_));
}

void KvCache::flush_evictions() {
  std::vector<EvictedBlock> evicted = blocks_.take_evicted();
  if (!evicted.empty() && on_evict_) on_evict_(evicted);
}

}  // namespace tessera::engine
