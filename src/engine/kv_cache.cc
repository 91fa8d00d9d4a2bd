#include "engine/kv_cache.h"

#include <algorithm>

#include <fmt/core.h>

#include "engine/kv_events.h"

namespace tessera::engine {

Result<std::unique_ptr<KvCache>> KvCache::create(ops::Device& device, const model::ModelConfig& config,
                                                 const KvCacheOptions& options) {
  if (options.block_tokens <= 0 || options.num_blocks <= 0) {
    return invalid_argument(fmt::format("KV cache needs positive block_tokens and num_blocks (got {} and {})",
                                        options.block_tokens, options.num_blocks));
  }
  // Windowed: the sliding layers get window_blocks of their own (sized here when the caller left it: room for one
  // sequence whose steps may reach num_blocks' worth of positions; the runner sizes it for its sequences).
  int window = 0, window_blocks = 0;
  if (options.window_kv && config.causal && kv_width(config, true) > 0 && config.sliding_window < config.max_seq_len) {
    window = config.sliding_window;
    window_blocks = options.window_blocks > 0 ? options.window_blocks
                                              : window_pool_blocks(config, options.block_tokens, 1,
                                                                   options.num_blocks * options.block_tokens);
    window_blocks = std::min(window_blocks, options.num_blocks);
  }
  std::unique_ptr<KvCache> cache(new KvCache(options, window, window_blocks));
  cache->windowed_.assign(static_cast<size_t>(config.n_layers), false);
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
    if (options.prefix_cache) cache->checkpoints_.resize(static_cast<size_t>(std::max(0, options.state_checkpoints)));
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
      cache->windowed_[static_cast<size_t>(l)] = cache->windowed_[static_cast<size_t>(src)];
      cache->k_.push_back(cache->k_[static_cast<size_t>(src)]);
      cache->v_.push_back(cache->v_[static_cast<size_t>(src)]);
      continue;
    }
    const bool windowed = window > 0 && config.is_sliding_layer(l);
    cache->windowed_[static_cast<size_t>(l)] = windowed;
    for (int kv = 0; kv < 2; ++kv) {
      ops::Tensor t(nullptr, 0, options.dtype,
                    {windowed ? window_blocks : options.num_blocks, options.block_tokens, config.layer_n_kv_heads(l),
                     config.layer_head_dim(l)});
      (windowed ? cache->window_bytes_per_block_ : cache->bytes_per_block_) += t.row_bytes();
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

Status KvCache::reserve(SequenceKv& seq, int32_t new_length, int32_t window_length, int32_t window_from) {
  if (has_state() && seq.state_slot < 0) {
    if (seq.length > 0 && seq.restore_checkpoint < 0 && seq.restore_state == nullptr)
      return failed_precondition(
          "this hybrid model's sequence has cached positions but no recurrent state (forked or imported KV carries "
          "no linear-attention state in this version)");
    if (free_slots_.empty())
      return resource_exhausted(fmt::format("all {} recurrent-state slots are in use", state_slots_));
    seq.state_slot = free_slots_.back();
    free_slots_.pop_back();
  }
  const int bt = options_.block_tokens;
  const auto need = static_cast<size_t>((new_length + bt - 1) / bt);
  const size_t had = seq.blocks.size();
  std::vector<size_t> taken;  // window blocks allocated here
  auto undo = [&](Status st) {
    while (seq.blocks.size() > had) {
      blocks_.release(seq.blocks.back());
      seq.blocks.pop_back();
    }
    for (size_t i : taken) {
      window_pool_.release(seq.window_blocks[i]);
      seq.window_blocks[i] = kNoBlock;
    }
    if (windowed()) seq.window_blocks.resize(std::min(seq.window_blocks.size(), std::max(had, seq.blocks.size())));
    return st;
  };
  while (seq.blocks.size() < need) {
    auto id = blocks_.allocate();
    if (!id.ok()) return undo(id.status());
    seq.blocks.push_back(*id);
  }
  if (windowed()) {
    trim_window(seq);
    // Every block from the first one the window reads to the last one asked for holds a block of its own (those
    // below left the window for good, or were never needed after a prefix hit).
    const auto wanted = std::min(
        need, static_cast<size_t>((std::max(window_length < 0 ? new_length : window_length, 0) + bt - 1) / bt));
    if (seq.window_blocks.size() < seq.blocks.size()) seq.window_blocks.resize(seq.blocks.size(), kNoBlock);
    for (size_t i = first_window_block(std::max(seq.length, window_from)); i < wanted; ++i) {
      if (seq.window_blocks[i] != kNoBlock) continue;
      auto id = window_pool_.allocate();
      if (!id.ok()) return undo(id.status());
      seq.window_blocks[i] = *id;
      taken.push_back(i);
    }
  }
  return ok_status();
}

int KvCache::window_blocks_held(const SequenceKv& seq) {
  return static_cast<int>(
      std::count_if(seq.window_blocks.begin(), seq.window_blocks.end(), [](BlockId b) { return b != kNoBlock; }));
}

bool KvCache::can_reserve(const SequenceKv& seq, int32_t new_length, int32_t window_from) const {
  const auto need = static_cast<size_t>((new_length + options_.block_tokens - 1) / options_.block_tokens);
  if (need > seq.blocks.size() && need - seq.blocks.size() > static_cast<size_t>(blocks_.available())) return false;
  if (!windowed()) return true;
  const size_t first = first_window_block(seq.length);  // reserve() gives back the blocks before it
  int wanted = 0, freed = 0;
  for (size_t i = first_window_block(std::max(seq.length, window_from)); i < need; ++i) {
    if (i >= seq.window_blocks.size() || seq.window_blocks[i] == kNoBlock) wanted++;
  }
  for (size_t i = 0; i < std::min(first, seq.window_blocks.size()); ++i) {
    const BlockId b = seq.window_blocks[i];
    if (b != kNoBlock && window_pool_.ref_count(b) == 1) freed++;
  }
  return wanted <= window_pool_.available() + freed;
}

void KvCache::trim_window(SequenceKv& seq) {
  if (!windowed()) return;
  const size_t first = std::min(first_window_block(seq.length), seq.window_blocks.size());
  for (size_t i = 0; i < first; ++i) {
    if (seq.window_blocks[i] == kNoBlock) continue;
    window_pool_.release(seq.window_blocks[i]);
    seq.window_blocks[i] = kNoBlock;
  }
}

void KvCache::drop_window_after(SequenceKv& seq, int32_t length) {
  if (!windowed()) return;
  const int bt = options_.block_tokens;
  for (auto i = static_cast<size_t>((std::max(length, 0) + bt - 1) / bt); i < seq.window_blocks.size(); ++i) {
    if (seq.window_blocks[i] == kNoBlock) continue;
    window_pool_.release(seq.window_blocks[i]);
    seq.window_blocks[i] = kNoBlock;
  }
}

int KvCache::match_prefix(SequenceKv& seq, std::span<const model::TokenId> tokens, int max_tokens, int* branch_at) {
  if (branch_at != nullptr) *branch_at = 0;
  const int bt = options_.block_tokens;
  if (!windowed() && !has_state()) {
    std::vector<BlockId> hit = blocks_.match_prefix(tokens, max_tokens);
    seq.blocks.insert(seq.blocks.end(), hit.begin(), hit.end());
    seq.length = static_cast<int32_t>(seq.blocks.size()) * bt;
    return seq.length;
  }
  // The longest cached prefix in the full layers' pool, shortened until the window before its end is cached too
  // (windowed) and a state checkpoint was taken at its end (hybrid).
  std::vector<BlockHash> hashes;
  if (blocks_.prefix_cache_enabled())
    hashes = BlockManager::chain_hashes(tokens, bt, static_cast<size_t>(std::max(0, max_tokens) / bt));
  size_t n = 0;
  while (n < hashes.size() && blocks_.holds(hashes[n])) n++;
  const size_t cached = n;
  std::shared_ptr<const uint8_t> spilled;  // usable(end)'s state from the second level, when the cache keeps none
  auto usable = [&](size_t end) {
    spilled.reset();
    if (has_state() && find_checkpoint(hashes[end - 1]) < 0) {
      if (checkpoint_lookup_) spilled = checkpoint_lookup_(hashes[end - 1]);
      if (spilled == nullptr) return false;
    }
    for (size_t i = first_window_block(static_cast<int32_t>(end) * bt); windowed() && i < end; ++i) {
      if (!window_pool_.holds(hashes[i])) return false;
    }
    return true;
  };
  while (n > 0 && !usable(n)) --n;
  std::vector<BlockId> hit = blocks_.match_prefix(tokens, static_cast<int>(n) * bt);  // counts the query either way
  seq.blocks.insert(seq.blocks.end(), hit.begin(), hit.end());
  seq.length = static_cast<int32_t>(seq.blocks.size()) * bt;
  if (windowed()) {
    seq.window_blocks.assign(seq.blocks.size(), kNoBlock);
    for (size_t i = first_window_block(seq.length); i < hit.size(); ++i)
      seq.window_blocks[i] = *window_pool_.acquire(hashes[i]);
  }
  if (branch_at != nullptr && has_state() && cached > hit.size() && continued_.count(hashes[cached - 1]) > 0)
    *branch_at = static_cast<int>(cached) * bt;
  if (has_state() && !hit.empty()) {
    const int c = find_checkpoint(hashes[hit.size() - 1]);
    if (c < 0 && spilled != nullptr && hit.size() == n) {  // the second level keeps the state there
      seq.restore_state = std::move(spilled);
      return seq.length;
    }
    if (c < 0) {  // the pool found fewer blocks than it said it held: no state to go on from
      release(seq);
      return 0;
    }
    Checkpoint& taken = checkpoints_[static_cast<size_t>(c)];
    taken.holders++;
    taken.used = ++checkpoint_clock_;
    // A conversation's next turn (or the same prompt again) goes on from its prompt's end or its reply's state and
    // keeps its own further on: both of that pair are then the first to go. A state no reply was paired with (a
    // shared system prompt's, a prompt's whose reply crossed no boundary) stays recently used.
    const BlockHash end = taken.reply ? taken.pair : taken.hash;
    bool paired = taken.reply;
    for (Checkpoint& k : checkpoints_) {
      if (k.reply && !k.running && k.pair == end && k.pair != 0) {
        k.used = 0;
        paired = true;
      }
    }
    if (paired) {
      taken.used = 0;
      if (const int e = find_checkpoint(end); e >= 0) checkpoints_[static_cast<size_t>(e)].used = 0;
    }
    seq.restore_checkpoint = c;
  }
  return seq.length;
}

int KvCache::find_checkpoint(BlockHash hash) const {
  auto it = written_.find(hash);
  return it == written_.end() ? -1 : it->second;
}

int KvCache::state_checkpoints_held() const { return static_cast<int>(written_.size()); }

uint8_t* KvCache::checkpoint_buffer(BlockHash hash) {
  if (checkpoints_.empty() || find_checkpoint(hash) >= 0) return nullptr;
  for (Checkpoint& c : checkpoints_) {
    if (c.filling && c.hash == hash) return c.bytes.data();  // another sequence of this step with the same prompt
  }
  Checkpoint* pick = least_recently_used();
  return pick == nullptr ? nullptr : refill(*pick, hash, /*spill=*/true);
}

uint8_t* KvCache::running_checkpoint_buffer(SequenceKv& seq, BlockHash hash, int32_t position, BlockHash prompt_end) {
  if (!keeps_reply_states()) return nullptr;
  if (const int kept = find_checkpoint(hash); kept >= 0) {
    // The same tokens ran before (a conversation sent again): the one kept goes as far, seq's own is of no more use.
    checkpoints_[static_cast<size_t>(kept)].used = ++checkpoint_clock_;
    for (Checkpoint& c : checkpoints_) {
      if (!c.running || c.hash != seq.running_checkpoint || &c == &checkpoints_[static_cast<size_t>(kept)]) continue;
      c.running = false;
      if (c.holders == 0 && !c.filling) forget(c, /*spill=*/false);
    }
    seq.running_checkpoint = hash;
    seq.running_position = position;
    return nullptr;
  }
  Checkpoint* pick = nullptr;
  for (Checkpoint& c : checkpoints_) {
    if (c.filling && c.hash == hash) return nullptr;  // another sequence's (the same tokens): it keeps that one
    if (!c.running || c.hash != seq.running_checkpoint || seq.running_checkpoint == 0) continue;
    if (c.holders == 0 && !c.filling)
      pick = &c;  // seq's own, free to go on
    else
      c.running = false;  // a prompt restores from it: it stays, as any other
  }
  if (pick == nullptr) {
    pick = least_recently_used();
    if (pick == nullptr) return nullptr;
    // Beyond half the checkpoints, only an empty one or one moved to the back (a state no prompt is expected to
    // take again) is given to a running one: the states prompts share stay.
    const bool given_up = !pick->written || pick->used == 0;
    if (2 * (running_checkpoints() + 1) > state_checkpoints() && !given_up) return nullptr;
  }
  uint8_t* out = refill(*pick, hash, /*spill=*/!pick->running);
  pick->running = true;
  pick->reply = true;
  pick->pair = prompt_end;
  seq.running_checkpoint = hash;
  seq.running_position = position;
  if (prompt_end != 0) {  // the next turn goes on from the reply: the prompt's end moves back now
    for (Checkpoint& c : checkpoints_) {
      if (c.hash == prompt_end && (c.written || c.filling)) c.used = 0;
    }
  }
  return out;
}

void KvCache::end_reply(SequenceKv& seq, bool comes_back) {
  if (seq.running_checkpoint == 0) return;
  for (Checkpoint& c : checkpoints_) {
    if (c.hash != seq.running_checkpoint || !c.reply) continue;
    if (comes_back) {
      if (const int e = c.pair != 0 ? find_checkpoint(c.pair) : -1; e >= 0)
        checkpoints_[static_cast<size_t>(e)].used = 0;
    } else if (c.running && c.holders == 0 && !c.filling) {
      forget(c, /*spill=*/false);
    }
  }
}

int KvCache::running_checkpoints() const {
  return static_cast<int>(
      std::count_if(checkpoints_.begin(), checkpoints_.end(), [](const Checkpoint& c) { return c.running; }));
}

KvCache::Checkpoint* KvCache::least_recently_used() {
  Checkpoint* pick = nullptr;
  for (Checkpoint& c : checkpoints_) {
    if (c.holders > 0 || c.filling || c.running) continue;
    // Empty ones first, then the least recently used.
    if (pick == nullptr || (!c.written && pick->written) || (c.written == pick->written && c.used < pick->used))
      pick = &c;
  }
  return pick;
}

void KvCache::forget(Checkpoint& c, bool spill) {
  if (!c.written) return;
  if (spill && checkpoint_dropped_) checkpoint_dropped_(c.hash, c.bytes);
  written_.erase(c.hash);
  if (KvEventLog* events = blocks_.event_log()) events->publish_state(KvEventType::kRemoved, c.hash, KvTier::kDevice);
  c.written = false;
}

uint8_t* KvCache::refill(Checkpoint& c, BlockHash hash, bool spill) {
  forget(c, spill);
  c.hash = hash;
  c.written = false;
  c.reply = false;
  c.pair = 0;
  c.filling = true;
  c.used = ++checkpoint_clock_;
  c.bytes.resize(state_bytes_);
  return c.bytes.data();
}

void KvCache::checkpoint_written(BlockHash hash, bool whole) {
  for (size_t i = 0; i < checkpoints_.size(); ++i) {
    Checkpoint& c = checkpoints_[i];
    if (!c.filling || c.hash != hash) continue;
    c.filling = false;
    c.written = whole;
    if (!whole) continue;
    written_[hash] = static_cast<int>(i);
    if (KvEventLog* events = blocks_.event_log()) events->publish_state(KvEventType::kStored, hash, KvTier::kDevice);
  }
}

const uint8_t* KvCache::pending_restore(const SequenceKv& seq) const {
  if (seq.restore_checkpoint < 0) return seq.restore_state.get();
  return checkpoints_[static_cast<size_t>(seq.restore_checkpoint)].bytes.data();
}

void KvCache::set_checkpoint_spill(CheckpointDropped dropped, CheckpointLookup lookup) {
  checkpoint_dropped_ = std::move(dropped);
  checkpoint_lookup_ = std::move(lookup);
}

const uint8_t* KvCache::checkpoint(BlockHash hash) const {
  const int c = find_checkpoint(hash);
  return c < 0 ? nullptr : checkpoints_[static_cast<size_t>(c)].bytes.data();
}

void KvCache::restored(SequenceKv& seq) {
  seq.restore_state.reset();
  if (seq.restore_checkpoint < 0) return;
  checkpoints_[static_cast<size_t>(seq.restore_checkpoint)].holders--;
  seq.restore_checkpoint = -1;
}

void KvCache::register_full_block(const SequenceKv& seq, size_t index, BlockHash hash, BlockHash parent) {
  blocks_.register_full_block(seq.blocks[index], hash);
  if (!checkpoints_.empty() && index > 0) {
    if (continued_.size() > 4 * static_cast<size_t>(options_.num_blocks)) continued_.clear();
    continued_.insert(parent);
  }
  if (windowed() && index < seq.window_blocks.size() && seq.window_blocks[index] != kNoBlock)
    window_pool_.register_full_block(seq.window_blocks[index], hash);
}

int64_t KvCache::kv_width(const model::ModelConfig& config, bool sliding) {
  int64_t width = 0;
  for (int l = 0; l < config.n_layers; ++l) {
    if (config.keeps_kv(l) && config.is_sliding_layer(l) == sliding) width += config.layer_kv_dim(l);
  }
  return width;
}

int KvCache::window_pool_blocks(const model::ModelConfig& config, int block_tokens, int sequences, int step_tokens) {
  if (!config.causal || kv_width(config, true) == 0 || config.sliding_window >= config.max_seq_len) return 0;
  // Between steps a sequence holds the blocks of its last window - 1 positions (one more where they straddle a
  // boundary); a step adds its positions' blocks, and one more for each sequence whose new positions start mid-block.
  const int held = (config.sliding_window - 1 + block_tokens - 1) / block_tokens + 1;
  const int growth = (step_tokens + block_tokens - 1) / block_tokens;
  return sequences * (held + 1) + growth;
}

void KvCache::release(SequenceKv& seq) {
  for (BlockId b : seq.blocks) blocks_.release(b);
  seq.blocks.clear();
  for (BlockId b : seq.window_blocks) {
    if (b != kNoBlock) window_pool_.release(b);
  }
  seq.window_blocks.clear();
  seq.length = 0;
  restored(seq);                      // a restore that never ran lets its checkpoint go
  if (seq.running_checkpoint != 0) {  // its last running checkpoint stays, as any other
    for (Checkpoint& c : checkpoints_) {
      if (c.running && c.hash == seq.running_checkpoint) c.running = false;
    }
    seq.running_checkpoint = 0;
    seq.running_position = 0;
  }
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
