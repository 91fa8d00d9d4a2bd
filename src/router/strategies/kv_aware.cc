// kv_aware: the node where this request costs least, cost = prefill_weight x (prompt tokens the node is not
// believed to have cached) + decode load (outstanding tokens already routed there). The cached part is exact
// where the node publishes KV events (NodeSnapshot::cached_blocks, router/kv_event_index.h), else it comes from
// the same approximate PrefixIndex as prefix_cache. Unlike prefix_cache there is no threshold: load
// and cache affinity trade off continuously through the weight. Ties: the least loaded.
#include <algorithm>

#include "router/strategies/builtin.h"
#include "router/strategies/prefix_index.h"

namespace tessera::router {
namespace {

class KvAware final : public Strategy {
 public:
  explicit KvAware(const StrategyOptions& o)
      : block_tokens_(o.block_tokens),
        weight_(o.prefill_weight),
        credit_(o.lower_tier_credit),
        index_(o.index_blocks_per_node) {}
  std::string_view name() const override { return "kv_aware"; }

  size_t pick(const RouteRequest& r, std::span<const NodeSnapshot> nodes) override {
    const std::vector<uint64_t> chain = block_chain(r.tokens, block_tokens_);
    const int64_t prompt = std::max<int64_t>(r.prompt_tokens, static_cast<int64_t>(r.tokens.size()));
    size_t best = 0;
    double best_cost = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      // Exact when the node publishes its KV events, else what the router's own routing history suggests.
      const int64_t blocks = nodes[i].cached_blocks >= 0 ? nodes[i].cached_blocks
                                                         : static_cast<int64_t>(index_.match(nodes[i].url, chain));
      // Blocks its host or disk tier holds are loaded, not computed: most of their cost is saved.
      const double cached =
          (static_cast<double>(blocks) + credit_ * static_cast<double>(nodes[i].lower_tier_blocks)) * block_tokens_;
      const double cost = weight_ * std::max(0.0, static_cast<double>(prompt) - cached) +
                          static_cast<double>(nodes[i].outstanding_tokens) / nodes[i].capacity;
      if (i == 0 || cost < best_cost ||
          (cost == best_cost &&
           nodes[i].in_flight / nodes[i].capacity < nodes[best].in_flight / nodes[best].capacity)) {
        best = i, best_cost = cost;
      }
    }
    return best;
  }
  void on_routed(const RouteRequest& r, const std::string& url) override {
    index_.insert(url, block_chain(r.tokens, block_tokens_));
  }
  void on_node_removed(const std::string& url) override { index_.remove_node(url); }

 private:
  int block_tokens_;
  double weight_;
  double credit_;
  PrefixIndex index_;
};

}  // namespace

std::unique_ptr<Strategy> make_kv_aware(const StrategyOptions& o) { return std::make_unique<KvAware>(o); }

}  // namespace tessera::router
