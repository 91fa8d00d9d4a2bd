// PrefixIndex: the router's approximate picture of each node's prefix cache, built only from the requests it
// routed there (block chain hashes), LRU-capped per node. "Approximate" because a node may have evicted
// blocks the index still lists; the cap keeps the index from believing much more than a node can hold.
// Shared by prefix_cache and kv_aware. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>

namespace tessera::router {

class PrefixIndex {
 public:
  explicit PrefixIndex(size_t blocks_per_node) : cap_(blocks_per_node) {}
  // Leading blocks of `chain` the node is believed to hold.
  size_t match(const std::string& url, std::span<const uint64_t> chain) const;
  // Records that the node now holds every block of `chain` (most recently used).
  void insert(const std::string& url, std::span<const uint64_t> chain);
  void remove_node(const std::string& url) { nodes_.erase(url); }
  size_t size(const std::string& url) const;

 private:
  struct Node {
    std::list<uint64_t> lru;  // front: most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  size_t cap_;
  std::unordered_map<std::string, Node> nodes_;
};

}  // namespace tessera::router
