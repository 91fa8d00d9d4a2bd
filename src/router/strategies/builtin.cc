#include "router/strategies/builtin.h"

namespace tessera::router {

void register_builtin_strategies(StrategyRegistry& r) {
  r.add("round_robin", make_round_robin);
  r.add("weighted_random", make_weighted_random);
  r.add("consistent_hash", make_consistent_hash);
  r.add("least_latency", make_least_latency);
  r.add("prefix_cache", make_prefix_cache);
  r.add("kv_aware", make_kv_aware);
}

}  // namespace tessera::router
