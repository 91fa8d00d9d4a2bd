// Factories of the built-in strategies, one per file in this folder, and the one call that registers them.
#pragma once

#include <memory>

#include "router/strategy.h"

namespace tessera::router {

std::unique_ptr<Strategy> make_round_robin(const StrategyOptions& options);
std::unique_ptr<Strategy> make_weighted_random(const StrategyOptions& options);
std::unique_ptr<Strategy> make_consistent_hash(const StrategyOptions& options);
std::unique_ptr<Strategy> make_least_latency(const StrategyOptions& options);
std::unique_ptr<Strategy> make_prefix_cache(const StrategyOptions& options);
std::unique_ptr<Strategy> make_kv_aware(const StrategyOptions& options);

void register_builtin_strategies(StrategyRegistry& registry);

}  // namespace tessera::router
