#include "router/strategies/builtin.h"

namespace tessera::router {

void register_builtin_strategies(StrategyRegistry& r) {
  (void)r.add("round_robin", make_round_robin);
  (void)r.add("weighted_random", make_weighted_random);
  (void)r.add("consistent_hash", make_consistent_hash);
  (void)r.add("least_latency", make_least_latency);
  (void)r.add("prefix_cache", make_prefix_cache);
  (void)r.add("kv_aware", make_kv_aware);
}

}  // namespace tessera::router
