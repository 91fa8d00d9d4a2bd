// Routing strategies against fake nodes (plain NodeSnapshot values) and a fake clock: distribution,
// stickiness, ring stability when a node leaves, prefix affinity and the load cap.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "base/rng.h"
#include "engine/block_manager.h"
#include "router/strategy.h"

namespace tessera::router {
namespace {

std::vector<NodeSnapshot> fake_nodes(int n) {
  std::vector<NodeSnapshot> out;
  for (int i = 0; i < n; ++i) {
    NodeSnapshot s;
    s.url = "http://10.0.0." + std::to_string(i + 1) + ":8000";
    s.tokens_per_s = 100;
    out.push_back(s);
  }
  return out;
}

std::unique_ptr<Strategy> make(const std::string& name, StrategyOptions o = {}) {
  auto s = builtin_strategies().create(name, o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(*s);
}

std::unique_ptr<Strategy> make_with(const std::string& name, const std::vector<NodeSnapshot>& nodes,
                                    StrategyOptions o = {}) {
  auto s = make(name, o);
  for (const auto& n : nodes) s->on_node_added(n.url);
  return s;
}

RouteRequest session(const std::string& id) {
  RouteRequest r;
  r.session_id = id;
  return r;
}

TEST(StrategyRegistry, UnknownNameListsKnownOnes) {
  auto s = builtin_strategies().create("fastest", {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  for (const char* name :
       {"round_robin", "weighted_random", "consistent_hash", "least_latency", "prefix_cache", "kv_aware"}) {
    EXPECT_NE(s.status().message().find(name), std::string::npos) << s.status().message();
    EXPECT_TRUE(builtin_strategies().create(name, {}).ok()) << name;
  }
}

TEST(RoundRobin, EveryNodeGetsTheSameShare) {
  auto nodes = fake_nodes(3);
  auto s = make_with("round_robin", nodes);
  std::map<size_t, int> count;
  for (int i = 0; i < 300; ++i) count[s->pick({}, nodes)]++;
  EXPECT_EQ(count[0], 100);
  EXPECT_EQ(count[1], 100);
  EXPECT_EQ(count[2], 100);
}

TEST(WeightedRandom, SharesFollowCapacity) {
  auto nodes = fake_nodes(3);
  nodes[0].capacity = 1, nodes[1].capacity = 2, nodes[2].capacity = 5;
  auto s = make_with("weighted_random", nodes);
  std::map<size_t, int> count;
  const int n = 80000;
  for (int i = 0; i < n; ++i) count[s->pick({}, nodes)]++;
  EXPECT_NEAR(count[0] / double(n), 1.0 / 8, 0.01);
  EXPECT_NEAR(count[1] / double(n), 2.0 / 8, 0.01);
  EXPECT_NEAR(count[2] / double(n), 5.0 / 8, 0.01);
}

TEST(ConsistentHash, SameSessionSameNodeAndKeysSpread) {
  auto nodes = fake_nodes(5);
  auto s = make_with("consistent_hash", nodes);
  std::map<size_t, int> count;
  for (int k = 0; k < 10000; ++k) {
    const size_t first = s->pick(session("sess-" + std::to_string(k)), nodes);
    count[first]++;
    if (k % 100 == 0) {
      for (int again = 0; again < 5; ++again) ASSERT_EQ(s->pick(session("sess-" + std::to_string(k)), nodes), first);
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_GT(count[i], 10000 / 5 * 0.7) << "node " << i;
    EXPECT_LT(count[i], 10000 / 5 * 1.3) << "node " << i;
  }
}

TEST(ConsistentHash, KeyFallsBackFromSessionToUserToPromptPrefix) {
  auto nodes = fake_nodes(8);
  auto s = make_with("consistent_hash", nodes);
  // The same user lands on one node whatever the prompt; without a user, prompts sharing their first 256
  // bytes land together.
  std::set<size_t> by_user, by_prefix;
  const std::string prefix(300, 'x');
  for (int i = 0; i < 50; ++i) {
    RouteRequest r;
    r.user = "alice";
    r.prompt = "question " + std::to_string(i);
    by_user.insert(s->pick(r, nodes));
    RouteRequest p;
    p.prompt = prefix + std::to_string(i);
    by_prefix.insert(s->pick(p, nodes));
  }
  EXPECT_EQ(by_user.size(), 1u);
  EXPECT_EQ(by_prefix.size(), 1u);
  // The session header wins over the user.
  std::set<size_t> by_session;
  for (int i = 0; i < 64; ++i) {
    RouteRequest r;
    r.user = "alice";
    r.session_id = "s" + std::to_string(i);
    by_session.insert(s->pick(r, nodes));
  }
  EXPECT_GT(by_session.size(), 1u);
}

TEST(ConsistentHash, FewKeysMoveWhenOneOfNNodesLeaves) {
  for (int n : {3, 5, 10}) {
    auto nodes = fake_nodes(n);
    auto s = make_with("consistent_hash", nodes);
    const int keys = 20000;
    std::vector<std::string> before;
    for (int k = 0; k < keys; ++k) before.push_back(nodes[s->pick(session(std::to_string(k)), nodes)].url);
    const std::string gone = nodes[1].url;
    s->on_node_removed(gone);
    auto rest = nodes;
    rest.erase(rest.begin() + 1);
    int moved = 0;
    for (int k = 0; k < keys; ++k) {
      const std::string after = rest[s->pick(session(std::to_string(k)), rest)].url;
      if (after != before[k]) {
        ++moved;
        EXPECT_EQ(before[k], gone) << "a key of a surviving node moved";
      }
    }
    EXPECT_LT(moved, keys * 2 / n) << n << " nodes";
    EXPECT_GT(moved, 0);
    // Back again: the ring is the same as before (incremental, deterministic points).
    s->on_node_added(gone);
    for (int k = 0; k < keys; k += 7) EXPECT_EQ(nodes[s->pick(session(std::to_string(k)), nodes)].url, before[k]);
  }
}

TEST(ConsistentHash, UnhealthyNodeIsSkippedWithoutMovingOtherKeys) {
  auto nodes = fake_nodes(4);
  auto s = make_with("consistent_hash", nodes);
  auto healthy = nodes;
  healthy.erase(healthy.begin() + 2);  // out of rotation but still a member of the ring
  for (int k = 0; k < 2000; ++k) {
    const std::string before = nodes[s->pick(session(std::to_string(k)), nodes)].url;
    const std::string now = healthy[s->pick(session(std::to_string(k)), healthy)].url;
    if (before != nodes[2].url) {
      EXPECT_EQ(now, before);
    }
  }
}

TEST(LeastLatency, QueuedWorkOverMeasuredSpeed) {
  auto nodes = fake_nodes(3);
  nodes[0].outstanding_tokens = 1000, nodes[0].tokens_per_s = 100;  // 10 s of work
  nodes[1].outstanding_tokens = 600, nodes[1].tokens_per_s = 200;   // 3 s
  nodes[2].outstanding_tokens = 100, nodes[2].tokens_per_s = 20;    // 5 s
  auto s = make_with("least_latency", nodes);
  RouteRequest r;
  r.prompt_tokens = 50, r.max_tokens = 50;
  EXPECT_EQ(s->pick(r, nodes), 1u);
  // Faster hardware absorbs a queue: a node twice as fast takes twice the work before losing.
  nodes = fake_nodes(2);
  nodes[1].tokens_per_s = 200;
  std::map<size_t, int> count;
  for (int i = 0; i < 300; ++i) {
    const size_t k = s->pick(r, nodes);
    nodes[k].outstanding_tokens += r.prompt_tokens + r.max_tokens;
    count[k]++;
  }
  EXPECT_NEAR(count[1], 200, 2);
  EXPECT_NEAR(count[0], 100, 2);
}

// 8 long shared prefixes x 50 requests with distinct suffixes, as token ids.
std::vector<RouteRequest> shared_prefix_workload(int prefixes, int per_prefix, int prefix_len) {
  Rng rng(7);
  std::vector<std::vector<int32_t>> heads(prefixes);
  for (auto& h : heads)
    for (int i = 0; i < prefix_len; ++i) h.push_back(static_cast<int32_t>(rng.next_u32() % 512));
  std::vector<RouteRequest> out;
  for (int i = 0; i < per_prefix; ++i) {
    for (int p = 0; p < prefixes; ++p) {
      RouteRequest r;
      r.tokens = heads[p];
      for (int t = 0; t < 20; ++t) r.tokens.push_back(static_cast<int32_t>(rng.next_u32() % 512));
      r.prompt_tokens = static_cast<int64_t>(r.tokens.size());
      out.push_back(r);
    }
  }
  return out;
}

TEST(PrefixCache, BlockHashesAreTheNodesHashes) {
  std::vector<int32_t> tokens(40);
  for (int i = 0; i < 40; ++i) tokens[i] = i * 7;
  auto chain = block_chain(tokens, 16);
  ASSERT_EQ(chain.size(), 2u);
  uint64_t h = engine::BlockManager::chain_hash(0, std::span<const int32_t>(tokens).subspan(0, 16));
  EXPECT_EQ(chain[0], h);
  EXPECT_EQ(chain[1], engine::BlockManager::chain_hash(h, std::span<const int32_t>(tokens).subspan(16, 16)));
}

TEST(PrefixCache, RequestsSharingAPrefixGoToOneNodeAndPrefixesSpread) {
  auto nodes = fake_nodes(3);
  auto s = make_with("prefix_cache", nodes);
  auto work = shared_prefix_workload(8, 50, 256);
  std::map<int, std::set<size_t>> nodes_of_prefix;
  std::map<size_t, int> per_node;
  for (size_t i = 0; i < work.size(); ++i) {
    const size_t k = s->pick(work[i], nodes);
    s->on_routed(work[i], nodes[k].url);
    nodes_of_prefix[static_cast<int>(i % 8)].insert(k);
    per_node[k]++;
  }
  for (const auto& [p, where] : nodes_of_prefix) EXPECT_EQ(where.size(), 1u) << "prefix " << p;
  EXPECT_EQ(per_node.size(), 3u);  // the 8 prefixes are spread over all 3 nodes
  // Round robin, for contrast, sends every prefix everywhere.
  auto rr = make_with("round_robin", nodes);
  std::map<int, std::set<size_t>> rr_nodes;
  for (size_t i = 0; i < work.size(); ++i) rr_nodes[static_cast<int>(i % 8)].insert(rr->pick(work[i], nodes));
  for (const auto& [p, where] : rr_nodes) EXPECT_EQ(where.size(), 3u);
}

TEST(PrefixCache, OverloadedBestMatchFallsBackToLeastLoaded) {
  auto nodes = fake_nodes(3);
  StrategyOptions o;
  o.overload_threshold = 4;
  auto s = make_with("prefix_cache", nodes, o);
  auto work = shared_prefix_workload(1, 3, 64);
  const size_t home = s->pick(work[0], nodes);
  s->on_routed(work[0], nodes[home].url);
  nodes[home].in_flight = 4;  // at the threshold: still the best place
  EXPECT_EQ(s->pick(work[1], nodes), home);
  nodes[home].in_flight = 5;  // beyond it: the least loaded node takes it
  const size_t other = s->pick(work[1], nodes);
  EXPECT_NE(other, home);
  s->on_routed(work[1], nodes[other].url);
  // Now both hold the prefix; with the first overloaded, the second is the best match.
  nodes[other].in_flight = 2;
  EXPECT_EQ(s->pick(work[2], nodes), other);
}

TEST(PrefixCache, IndexIsCappedPerNode) {
  auto nodes = fake_nodes(2);
  StrategyOptions o;
  o.index_blocks_per_node = 4;  // one 64-token prompt = 4 blocks
  auto s = make_with("prefix_cache", nodes, o);
  auto a = shared_prefix_workload(2, 1, 64);
  s->on_routed(a[0], nodes[0].url);
  nodes[1].in_flight = 0;
  EXPECT_EQ(s->pick(a[0], nodes), 0u);
  s->on_routed(a[1], nodes[0].url);  // evicts a[0]'s blocks from node 0's index
  nodes[0].in_flight = 1;            // now only a match would keep a[0] on node 0
  EXPECT_EQ(s->pick(a[0], nodes), 1u);
}

TEST(KvAware, TradesCachedPrefillAgainstDecodeLoad) {
  auto nodes = fake_nodes(2);
  auto s = make_with("kv_aware", nodes);
  auto work = shared_prefix_workload(1, 2, 512);
  s->on_routed(work[0], nodes[0].url);
  nodes[0].outstanding_tokens = 300;  // 512 cached tokens outweigh 300 tokens of queued decode
  EXPECT_EQ(s->pick(work[1], nodes), 0u);
  nodes[0].outstanding_tokens = 900;  // now the queue costs more than prefilling 532 tokens elsewhere
  EXPECT_EQ(s->pick(work[1], nodes), 1u);
}

}  // namespace
}  // namespace tessera::router
