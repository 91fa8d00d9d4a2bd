// HostPool: the host-memory tier of the host connector, a bounded LRU map from a block's chain hash to its record.
// Entries are shared: a load holding a block keeps its bytes alive even if the pool evicts the entry meanwhile, so
// nothing needs pinning. Engine thread only (the gauges are atomics, read by stats()).
#pragma once

#include <atomic>
#include <cstddef>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/host/block_file.h"

namespace tessera::kv {

class HostPool {
 public:
  explicit HostPool(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The block, or null; `touch` makes it the most recently used.
  std::shared_ptr<const HostBlock> find(engine::BlockHash hash, bool touch = false);
  bool contains(engine::BlockHash hash) const { return map_.count(hash) > 0; }
  // Adds (or refreshes) a block as the most recently used (a record of it with the state section replaces one
  // without), then evicts the least recently used entries while the
  // pool holds more than its capacity (a block larger than the capacity is evicted at once). Returns the evicted.
  std::vector<std::shared_ptr<const HostBlock>> insert(std::shared_ptr<const HostBlock> block);
  void erase(engine::BlockHash hash);

  size_t capacity() const { return capacity_; }
  size_t bytes() const { return bytes_.load(); }
  size_t blocks() const { return blocks_.load(); }

 private:
  struct Entry {
    std::shared_ptr<const HostBlock> block;
    std::list<engine::BlockHash>::iterator lru;
  };
  size_t capacity_;
  std::list<engine::BlockHash> lru_;  // front: least recently used
  std::unordered_map<engine::BlockHash, Entry> map_;
  std::atomic<size_t> bytes_{0}, blocks_{0};
};

}  // namespace tessera::kv
