// Routing strategies: given a request and the nodes in rotation, pick one.
//
// A strategy is a deterministic object (values in, a choice out; randomness from a seeded Rng, time from the
// injected Clock) told about membership changes and about where each request went, so it can keep its own
// state (a hash ring, a prefix index). One file per strategy under strategies/, registered by name in a
// StrategyRegistry; an unknown name is an error listing the known ones.
//
// Thread-safety: a Strategy is not thread-safe; the gateway serialises every call on one mutex (each call is
// microseconds, far below the cost of the proxied request).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/registry.h"
#include "base/status.h"

namespace tessera::router {

// A node as a strategy sees it: a copy taken under the registry's lock.
struct NodeSnapshot {
  std::string url;
  double capacity = 1;              // relative size (weight), > 0
  int in_flight = 0;                // requests routed and not yet finished
  int64_t outstanding_tokens = 0;   // prompt + requested output tokens of those requests
  double tokens_per_s = 0;          // measured generation speed (EWMA), > 0
  std::string role;                 // "both", "prefill", "decode"; empty: not known yet
  std::string host_id;              // empty: not known
  std::string runner;               // "generate" or "pooling" (embeddings), from /health; empty: not known yet
  std::vector<std::string> models;  // the model names it serves (control plane or /health); empty: not known yet
  // Leading blocks of the request's prompt the node's prefix cache holds, from its KV events (kv_event_index.h);
  // -1: not known (the node publishes none, or the prompt's token ids are not the node's).
  int64_t cached_blocks = -1;
  int64_t lower_tier_blocks = 0;  // the blocks right after those that its host or disk tier holds
};

// What strategies may look at in a request.
struct RouteRequest {
  std::string session_id;       // x-session-id header
  std::string user;             // the body's `user` field
  std::string prompt;           // prompt text (chat: messages joined), for keys when there are no tokens
  std::vector<int32_t> tokens;  // the prompt as token ids (tokenizer, or ids sent by the client); may be empty
  int64_t prompt_tokens = 0;    // tokens.size() when known, else an estimate
  int64_t max_tokens = 16;      // requested output tokens
  std::string runner;           // the node runner it needs ("generate", "pooling" for embeddings); empty: any
  std::string model;            // the body's `model`: only nodes serving it take the request; empty: any
  bool exact_tokens = false;    // `tokens` are the ids the node will cache (the model's tokenizer, or the client's)
};

struct StrategyOptions {
  const Clock* clock = &SteadyClock::instance();
  uint64_t seed = 1;
  int virtual_nodes = 160;                 // consistent_hash: ring points per node
  size_t key_prefix_bytes = 256;           // consistent_hash: prompt bytes used when there is no session or user
  int block_tokens = 16;                   // prefix strategies: tokens per hashed block (the nodes' --block-size)
  size_t index_blocks_per_node = 1 << 16;  // prefix strategies: LRU cap of each node's approximate index
  double overload_threshold = 8;           // prefix_cache: requests in flight above the least loaded that
                                           // make the best match fall back to the least loaded node
  double prefill_weight = 1;               // kv_aware: cost per uncached prompt token
  // kv_aware: how much of computing a block a node saves by loading it from its host or disk tier (KV events).
  double lower_tier_credit = 0.75;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  // Index into `nodes` (never empty) of the node to use.
  virtual size_t pick(const RouteRequest& request, std::span<const NodeSnapshot> nodes) = 0;
  virtual void on_node_added(const std::string& url) {}
  virtual void on_node_removed(const std::string& url) {}
  // The request was sent to `url` (after pick(), or to another node on a retry).
  virtual void on_routed(const RouteRequest& request, const std::string& url) {}
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(const StrategyOptions&)>;

class StrategyRegistry : public Registry<StrategyFactory> {
 public:
  StrategyRegistry() : Registry("routing strategy") {}
  // NotFound naming the known strategies when `name` is not registered.
  Result<std::unique_ptr<Strategy>> create(std::string_view name, const StrategyOptions& options) const;
};

// The registry with every built-in strategy (round_robin, weighted_random, consistent_hash, least_latency,
// prefix_cache, kv_aware).
const StrategyRegistry& builtin_strategies();

// Helpers shared by strategies.
// Chain hashes of the prompt's whole blocks, as the node's prefix cache computes them.
std::vector<uint64_t> block_chain(std::span<const int32_t> tokens, int block_tokens);
// Expected seconds until the node has worked through its queue plus `extra_tokens`.
double expected_latency_s(const NodeSnapshot& node, int64_t extra_tokens);
// Index of the node with the fewest requests in flight per unit of capacity (ties: lowest index).
size_t least_loaded(std::span<const NodeSnapshot> nodes);

}  // namespace tessera::router
