// The router's exact prefix index: for each node, the block hashes its prefix cache holds, kept current from the
// node's own KV events (GET /internal/kv/events, api/kv_events.h) rather than guessed from the requests the router
// sent (strategies/prefix_index.h). A KvEventPoller reads every node in rotation every `interval_ms` and applies
// what it got; a node's first read, a restarted node and a reader that fell behind get the node's whole set
// (`reset`). The strategies read it through NodeSnapshot::cached_blocks (gateway.cc fills it per request).
//
// Thread-safety: KvEventIndex is thread-safe; the poller has its own thread.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api/kv_events.h"
#include "base/cluster_token.h"
#include "base/status.h"
#include "base/task_pool.h"
#include "router/strategy.h"

namespace tessera::router {

class KvEventIndex {
 public:
  // Applies one answer of `url`. A non-reset answer must continue where the node's last one ended (same epoch, its
  // first event right after the last number seen); otherwise FailedPrecondition, the node's entry is dropped and
  // the next read starts over (a reset).
  Status apply(const std::string& url, const api::KvEventsBody& body);
  // Where the next read of `url` starts: {epoch, after}; {0, 0} for a node not read yet.
  std::pair<uint64_t, uint64_t> cursor(const std::string& url) const;
  struct Match {
    int64_t device = -1;  // leading blocks of the chain in the node's device cache; -1: not known
    int64_t lower = 0;    // the blocks right after those that its host or disk tier holds (loaded, not computed)
  };
  // How much of `chain` the node holds; device -1 when the node's events are not known, or its block size is not
  // `block_tokens` (its hashes would not be these). A hybrid model's node: up to the last block after which it holds
  // the state.
  Match match(const std::string& url, std::span<const uint64_t> chain, int block_tokens) const;
  // match() for each node, into its NodeSnapshot::cached_blocks and lower_tier_blocks (what the strategies read).
  void annotate(std::span<NodeSnapshot> nodes, std::span<const uint64_t> chain, int block_tokens) const;
  // Blocks the node holds in each tier (device, host, disk).
  std::array<size_t, api::kKvTiers> blocks(const std::string& url) const;
  // A hybrid model's node: the blocks after which it holds the state, per tier; nullopt for any other node.
  std::optional<std::array<size_t, api::kKvTiers>> states(const std::string& url) const;
  void remove_node(const std::string& url);

 private:
  struct Node {
    uint64_t epoch = 0, last = 0;
    int block_tokens = 0;
    std::unordered_map<uint64_t, uint8_t> held;  // hash -> the tiers holding it (bit t: api::kKvTierNames[t])
    std::array<size_t, api::kKvTiers> count{};
    // A hybrid model's node (api::KvEventsBody::states): the blocks after which a tier holds the state, as `held`.
    bool states = false;
    std::unordered_map<uint64_t, uint8_t> state_held;
    std::array<size_t, api::kKvTiers> state_count{};
  };
  mutable std::mutex mu_;
  std::map<std::string, Node> nodes_;  // GUARDED_BY(mu_)
};

struct KvEventPollerOptions {
  ClusterToken cluster_token;
  std::string tls_ca_file;
  int interval_ms = 100;
  int timeout_ms = 1000;
  int threads = 4;
};

class KvEventPoller {
 public:
  // `nodes` lists the URLs to read now (those in rotation); called on the poller's thread.
  KvEventPoller(KvEventIndex& index, std::function<std::vector<std::string>()> nodes, KvEventPollerOptions options);
  ~KvEventPoller();
  void start();
  void stop();
  // Reads `url` once (also what the poller's thread does); false when the node could not be read (it is then left
  // alone for a while: 30 s without the route, 2 s when it did not answer).
  bool poll(const std::string& url);

 private:
  KvEventIndex& index_;
  std::function<std::vector<std::string>()> nodes_;
  const KvEventPollerOptions options_;
  TaskPool pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                     // GUARDED_BY(mu_)
  std::unordered_set<std::string> busy_;  // GUARDED_BY(mu_): nodes with a read in flight
  // Nodes that publish no events (no such route: not a tessera node, or an older one) or do not answer are read
  // again only after this, so a fleet of them does not cost a request per node per interval.
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> quiet_until_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tessera::router
