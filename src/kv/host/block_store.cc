#include "kv/host/block_store.h"

namespace tessera::kv {

std::shared_ptr<const HostBlock> HostPool::find(engine::BlockHash hash, bool touch) {
  auto it = map_.find(hash);
  if (it == map_.end()) return nullptr;
  if (touch) lru_.splice(lru_.end(), lru_, it->second.lru);
  return it->second.block;
}

std::vector<std::shared_ptr<const HostBlock>> HostPool::insert(std::shared_ptr<const HostBlock> block) {
  std::vector<std::shared_ptr<const HostBlock>> evicted;
  auto it = map_.find(block->hash);
  if (it != map_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    if (block->payload.size() > it->second.block->payload.size()) {  // the same block, now with the state after it
      bytes_ += block->payload.size() - it->second.block->payload.size();
      it->second.block = std::move(block);
    }
  } else {
    const engine::BlockHash h = block->hash;
    bytes_ += block->payload.size();
    blocks_++;
    map_.emplace(h, Entry{std::move(block), lru_.insert(lru_.end(), h)});
  }
  while (bytes_.load() > capacity_ && !lru_.empty()) {
    auto victim = map_.find(lru_.front());
    bytes_ -= victim->second.block->payload.size();
    blocks_--;
    evicted.push_back(std::move(victim->second.block));
    map_.erase(victim);
    lru_.pop_front();
  }
  return evicted;
}

void HostPool::erase(engine::BlockHash hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return;
  bytes_ -= it->second.block->payload.size();
  blocks_--;
  lru_.erase(it->second.lru);
  map_.erase(it);
}

}  // namespace tessera::kv
