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
  auto alloc = [&](DType dtype, std::initializer_list<int64_t> shape) -> Result<ops::Tensor> {
    ops::Tensor t(nullptr, 0, dtype, shape);
    TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device.alloc(t.bytes()));
    t.buffer = buf.get();
    cache->buffers_.push_back(std::move(buf));
    return t;
  };
  if (config.has_linear_layers()) {
    if (options.state_slots <= 0)
      return invalid_argument("a hybrid model's KV cache needs recurrent-state slots (state_slots > 0)");
    cache->state_slots_ = options.state_slots;
    cache->state_bytes_ = config.recurrent_state_bytes();
    for (int32_t s = options.state_slots - 1; s >= 0; --s) cache->free_slots_.push_back(s);
  }
  cache->conv_.resize(static_cast<size_t>(config.n_layers));
  cache->recurrent_.resize(static_cast<size_t>(config.n_layers));
  for (int l = 0; l < config.n_layers; ++l) {
    if (config.layer_kind(l).attention == model::AttentionKind::kLinear) {
      const model::LinearAttentionConfig& la = config.linear;
      const int64_t slots = options.state_slots;
      TS_ASSIGN_OR_RETURN(cache->conv_[static_cast<size_t>(l)],
                          alloc(DType::kF32, {slots, la.conv_kernel - 1, la.conv_channels()}));
      TS_ASSIGN_OR_RETURN(cache->recurrent_[static_cast<size_t>(l)],
                          alloc(DType::kF32, {slots, la.v_heads, la.head_dim, la.head_dim}));
      cache->k_.emplace_back();
      cache->v_.emplace_back();
      continue;
    }
    if (const int src = config.kv_source_layer(l); src != l) {  // gemma4: reads an earlier layer's K and V
      cache->k_.push_back(cache->k_[static_cast<size_t>(src)]);
      cache->v_.push_back(cache->v_[static_cast<size_t>(src)]);
      continue;
    }
    for (int kv = 0; kv < 2; ++kv) {
      ops::Tensor t(nullptr, 0, options.dtype,
                    {options.num_blocks, options.block_tokens, config.layer_n_kv_heads(l), config.layer_head_dim(l)});
      cache->bytes_per_block_ += t.row_bytes();
      TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device.alloc(t.bytes()));
      t.buffer = buf.get();
      cache->buffers_.push_back(std::move(buf));
      (kv == 0 ? cache->k_ : cache->v_).push_back(t);
    }
  }
  return cache;
}

ops::Tensor KvCache::conv_state(int layer, int slot) const {
  const ops::Tensor& t = conv_[static_cast<size_t>(layer)];
  return t.rows(slot, 1).reshaped({t.dim(1), t.dim(2)});
}

ops::Tensor KvCache::recurrent_state(int layer, int slot) const {
  const ops::Tensor& t = recurrent_[static_cast<size_t>(layer)];
  return t.rows(slot, 1).reshaped({t.dim(1), t.dim(2), t.dim(3)});
}

Status KvCache::reserve(SequenceKv& seq, int32_t new_length) {
  if (has_state() && seq.state_slot < 0) {
    if (seq.length > 0)
      return failed_precondition(
          "this hybrid model's sequence has cached positions but no recurrent state (forked or imported KV carries "
          "no linear-attention state in this version)");
    if (free_slots_.empty())
      return resource_exhausted(fmt::format("all {} recurrent-state slots are in use", state_slots_));
    seq.state_slot = free_slots_.back();
    free_slots_.pop_back();
  }
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
  if (seq.state_slot >= 0) {
    free_slots_.push_back(seq.state_slot);
    seq.state_slot = -1;
  }
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
