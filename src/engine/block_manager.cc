#include "engine/block_manager.h"

#include <xxhash.h>

#include <fmt/core.h>

#include "base/check.h"

namespace tessera::engine {

BlockManager::BlockManager(int num_blocks, int block_tokens, bool enable_prefix_cache)
    : num_blocks_(num_blocks),
      block_tokens_(block_tokens),
      prefix_cache_(enable_prefix_cache),
      blocks_(static_cast<size_t>(num_blocks)) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(static_cast<BlockId>(i));
}

size_t BlockManager::index(BlockId id) const {
  auto i = static_cast<size_t>(id);
  TS_CHECK(i < blocks_.size());
  return i;
}

Result<BlockId> BlockManager::allocate() {
  BlockId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    Block& b = blocks_[index(id)];
    by_hash_.erase(b.hash);
    b.hashed = false;
    stats_.evictions++;
    if (track_evictions_) evicted_.push_back({id, b.hash});
    if (events_ != nullptr) events_->publish(KvEventType::kRemoved, b.hash);
  } else {
    return resource_exhausted(fmt::format("all {} KV blocks are in use", num_blocks_));
  }
  blocks_[index(id)].refs = 1;
  return id;
}

void BlockManager::retain(BlockId id) {
  Block& b = blocks_[index(id)];
  if (b.refs == 0) {
    TS_CHECK(b.hashed);  // only a cached block can be revived
    evictable_.erase(b.lru);
  }
  b.refs++;
}

void BlockManager::release(BlockId id) {
  Block& b = blocks_[index(id)];
  TS_CHECK(b.refs > 0);
  if (--b.refs > 0) return;
  if (b.hashed) {
    b.lru = evictable_.insert(evictable_.end(), id);
  } else {
    free_.push_back(id);
  }
}

BlockHash BlockManager::chain_hash(BlockHash parent, std::span<const model::TokenId> block) {
  return XXH3_64bits_withSeed(block.data(), block.size_bytes(), parent);
}

std::vector<BlockHash> BlockManager::chain_hashes(std::span<const model::TokenId> tokens, int block_tokens,
                                                  size_t max_blocks) {
  std::vector<BlockHash> out;
  const size_t bt = static_cast<size_t>(block_tokens);
  BlockHash h = 0;
  for (size_t start = 0; start + bt <= tokens.size() && out.size() < max_blocks; start += bt) {
    h = chain_hash(h, tokens.subspan(start, bt));
    out.push_back(h);
  }
  return out;
}

std::vector<BlockId> BlockManager::match_prefix(std::span<const model::TokenId> tokens, int max_tokens) {
  std::vector<BlockId> out;
  stats_.queries++;
  stats_.query_tokens += tokens.size();
  if (!prefix_cache_) return out;
  BlockHash h = 0;
  const size_t bt = static_cast<size_t>(block_tokens_);
  for (size_t start = 0; start + bt <= tokens.size() && start + bt <= static_cast<size_t>(max_tokens); start += bt) {
    h = chain_hash(h, tokens.subspan(start, bt));
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    retain(it->second);
    out.push_back(it->second);
  }
  stats_.hit_tokens += out.size() * bt;
  return out;
}

std::optional<BlockId> BlockManager::acquire(BlockHash hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  retain(it->second);
  return it->second;
}

void BlockManager::register_full_block(BlockId id, BlockHash hash) {
  if (!prefix_cache_) return;
  Block& b = blocks_[index(id)];
  if (b.hashed) return;
  if (by_hash_.count(hash)) return;
  b.hashed = true;
  b.hash = hash;
  by_hash_.emplace(hash, id);
  if (events_ != nullptr) events_->publish(KvEventType::kStored, hash);
}

}  // namespace tessera::engine
