// consistent_hash: requests with the same key go to the same node. Key: the x-session-id header, else the
// `user` field, else the first bytes of the prompt. Nodes own `virtual_nodes` points each on a 64-bit ring;
// a key belongs to the first point at or after its hash whose node is in rotation. Membership changes add or
// erase one node's points (the ring is never rebuilt), so when one of N nodes leaves only the keys it owned
// (about 1/N) move.
#include <xxhash.h>

#include <string>
#include <unordered_map>

#include "router/strategies/builtin.h"

namespace tessera::router {
namespace {

uint64_t hash_of(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

class ConsistentHash final : public Strategy {
 public:
  explicit ConsistentHash(const StrategyOptions& o)
      : virtual_nodes_(o.virtual_nodes), prefix_bytes_(o.key_prefix_bytes) {}
  std::string_view name() const override { return "consistent_hash"; }

  void on_node_added(const std::string& url) override {
    for (int i = 0; i < virtual_nodes_; ++i) ring_.emplace(point(url, i), url);
  }
  void on_node_removed(const std::string& url) override {
    for (int i = 0; i < virtual_nodes_; ++i) {
      auto it = ring_.find(point(url, i));
      if (it != ring_.end() && it->second == url) ring_.erase(it);
    }
  }

  size_t pick(const RouteRequest& r, std::span<const NodeSnapshot> nodes) override {
    const uint64_t h = hash_of(key(r));
    std::unordered_map<std::string_view, size_t> index;
    for (size_t i = 0; i < nodes.size(); ++i) index.emplace(nodes[i].url, i);
    auto it = ring_.lower_bound(h);
    for (size_t seen = 0; seen < ring_.size(); ++seen, ++it) {
      if (it == ring_.end()) it = ring_.begin();
      auto found = index.find(it->second);
      if (found != index.end()) return found->second;
    }
    return h % nodes.size();  // none of the candidates is on the ring (not announced): still deterministic
  }

 private:
  static uint64_t point(const std::string& url, int i) { return hash_of(url + "#" + std::to_string(i)); }
  std::string key(const RouteRequest& r) const {
    if (!r.session_id.empty()) return "s:" + r.session_id;
    if (!r.user.empty()) return "u:" + r.user;
    if (!r.prompt.empty()) return "p:" + r.prompt.substr(0, prefix_bytes_);
    const size_t n = std::min(r.tokens.size(), prefix_bytes_ / sizeof(int32_t));
    return "t:" + std::string(reinterpret_cast<const char*>(r.tokens.data()), n * sizeof(int32_t));
  }

  int virtual_nodes_;
  size_t prefix_bytes_;
  std::map<uint64_t, std::string> ring_;
};

}  // namespace

std::unique_ptr<Strategy> make_consistent_hash(const StrategyOptions& o) { return std::make_unique<ConsistentHash>(o); }

}  // namespace tessera::router
