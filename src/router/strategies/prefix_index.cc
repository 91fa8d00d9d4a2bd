#include "router/strategies/prefix_index.h"

namespace tessera::router {

size_t PrefixIndex::match(const std::string& url, std::span<const uint64_t> chain) const {
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return 0;
  size_t n = 0;
  while (n < chain.size() && it->second.where.count(chain[n]) != 0) ++n;
  return n;
}

void PrefixIndex::insert(const std::string& url, std::span<const uint64_t> chain) {
  Node& node = nodes_[url];
  // Last block first, so the chain's root ends up most recent: eviction then trims chains from their tails,
  // and what stays is still a matchable prefix.
  for (auto rit = chain.rbegin(); rit != chain.rend(); ++rit) {
    const uint64_t h = *rit;
    auto it = node.where.find(h);
    if (it != node.where.end()) {
      node.lru.splice(node.lru.begin(), node.lru, it->second);
      continue;
    }
    node.lru.push_front(h);
    node.where.emplace(h, node.lru.begin());
    if (node.lru.size() > cap_) {
      node.where.erase(node.lru.back());
      node.lru.pop_back();
    }
  }
}

size_t PrefixIndex::size(const std::string& url) const {
  auto it = nodes_.find(url);
  return it == nodes_.end() ? 0 : it->second.lru.size();
}

}  // namespace tessera::router
