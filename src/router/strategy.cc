#include "router/strategy.h"

#include <xxhash.h>

#include <mutex>

#include <fmt/core.h>

#include "router/strategies/builtin.h"

namespace tessera::router {

Result<std::unique_ptr<Strategy>> StrategyRegistry::create(std::string_view name,
                                                           const StrategyOptions& options) const {
  TS_ASSIGN_OR_RETURN(Entry e, find(name));
  return e.factory(options);
}

const StrategyRegistry& builtin_strategies() {
  static StrategyRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_strategies(registry); });
  return registry;
}

std::vector<uint64_t> block_chain(std::span<const int32_t> tokens, int block_tokens) {
  // Same function and seeding as engine::BlockManager::chain_hash (XXH3 of the block's int32 ids, seeded
  // with the previous block's hash, 0 for the first), so the router's index speaks the nodes' language.
  std::vector<uint64_t> out;
  if (block_tokens <= 0) return out;
  const size_t bt = static_cast<size_t>(block_tokens);
  uint64_t h = 0;
  for (size_t start = 0; start + bt <= tokens.size(); start += bt) {
    h = XXH3_64bits_withSeed(tokens.data() + start, bt * sizeof(int32_t), h);
    out.push_back(h);
  }
  return out;
}

double expected_latency_s(const NodeSnapshot& node, int64_t extra_tokens) {
  const double speed = node.tokens_per_s > 0 ? node.tokens_per_s : 1;
  return static_cast<double>(node.outstanding_tokens + extra_tokens) / speed;
}

size_t least_loaded(std::span<const NodeSnapshot> nodes) {
  size_t best = 0;
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].in_flight / nodes[i].capacity < nodes[best].in_flight / nodes[best].capacity) best = i;
  }
  return best;
}

}  // namespace tessera::router
