// prefix_cache: send a request where its prompt's leading blocks were sent before, so the node's prefix cache
// already holds them. The prompt is cut into blocks of `block_tokens` tokens and chain-hashed like the
// nodes do; each node's approximate PrefixIndex says how many leading blocks it holds. The longest match
// wins (ties: the least loaded). A request no node has seen goes to the least loaded node. Load cap: when
// the best match has more than `overload_threshold` requests in flight (per unit of capacity) beyond the
// least loaded node, the request goes to the least loaded node instead, which then learns the prefix too.
#include "router/strategies/builtin.h"
#include "router/strategies/prefix_index.h"

namespace tessera::router {
namespace {

class PrefixCache final : public Strategy {
 public:
  explicit PrefixCache(const StrategyOptions& o)
      : block_tokens_(o.block_tokens), threshold_(o.overload_threshold), index_(o.index_blocks_per_node) {}
  std::string_view name() const override { return "prefix_cache"; }

  size_t pick(const RouteRequest& r, std::span<const NodeSnapshot> nodes) override {
    const std::vector<uint64_t> chain = block_chain(r.tokens, block_tokens_);
    auto load = [&](size_t i) { return nodes[i].in_flight / nodes[i].capacity; };
    // The least loaded node; equally loaded ones take turns, so new prefixes spread even when idle.
    std::vector<size_t> idlest;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (idlest.empty() || load(i) < load(idlest[0]))
        idlest.assign(1, i);
      else if (load(i) == load(idlest[0]))
        idlest.push_back(i);
    }
    const size_t idle = idlest[turn_++ % idlest.size()];
    size_t best = idle, best_match = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const size_t m = nodes[i].cached_blocks >= 0
                           ? static_cast<size_t>(nodes[i].cached_blocks + nodes[i].lower_tier_blocks)
                           : index_.match(nodes[i].url, chain);
      if (m > best_match || (m == best_match && m > 0 && load(i) < load(best))) best = i, best_match = m;
    }
    if (best_match == 0) return idle;
    if (load(best) > load(idle) + threshold_) return idle;
    return best;
  }
  void on_routed(const RouteRequest& r, const std::string& url) override {
    index_.insert(url, block_chain(r.tokens, block_tokens_));
  }
  void on_node_removed(const std::string& url) override { index_.remove_node(url); }

 private:
  int block_tokens_;
  double threshold_;
  uint64_t turn_ = 0;
  PrefixIndex index_;
};

}  // namespace

std::unique_ptr<Strategy> make_prefix_cache(const StrategyOptions& o) { return std::make_unique<PrefixCache>(o); }

}  // namespace tessera::router
