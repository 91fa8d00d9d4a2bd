// FleetSampler: the dashboard's view of the nodes and the planner, refreshed on a thread of its own while
// someone is looking. Each interval it asks every registered node for GET /health and GET /metrics (at most
// kFanout at once, each bounded by a timeout; with the cluster token), turns the decode nodes' per-prefill
// KV byte counters into link rates, and reads the planner's history from the control plane
// (planner_view.h). It samples only while the page was polled within `watch_ms`, so an unwatched router
// adds no load to its nodes; a poll after a quiet spell wakes it at once.
//
// Threads: one sampler thread (start()/stop()); snapshot() and touch() from any thread, never blocking on
// the network (they read what the last sample left under the mutex).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "ctrl/store.h"
#include "router/dashboard/node_report.h"
#include "router/node_registry.h"

namespace tessera::router {

struct SamplerOptions {
  ClusterToken cluster_token;  // sent to the nodes
  std::string tls_ca_file;     // for https:// nodes
  int interval_ms = 1000;
  int timeout_ms = 1000;     // per node request
  int watch_ms = 30000;      // keep sampling this long after the last touch()
  int history_points = 300;  // samples kept for the KV and link charts
};

class FleetSampler {
 public:
  // `registry` must outlive this.
  FleetSampler(NodeRegistry& registry, SamplerOptions options);
  ~FleetSampler();  // stops

  // Starts the thread; `store` (may be null: no control plane, the planner shows as "no_ctrl") is where the
  // planner's history is read. Once; sample_now() only after it.
  void start(std::unique_ptr<ctrl::Store> store);
  void stop();
  // Someone is looking: keep sampling, and sample now when the last sample is older than the interval.
  void touch();
  // Runs one sample on the calling thread (what the thread does each interval).
  void sample_now();

  // {"nodes": {url: {...report...}}, "link": {"t":[...], "bytes_per_s":[...], "pairs":[...]},
  //  "kv": {"t":[...], url:[use or null, ...]}, "planner": {...}}
  nlohmann::json snapshot() const;

 private:
  struct Reported {
    NodeReport report;
    int64_t sampled_ms = 0;
    std::string error;  // why the last sample failed; empty when it worked
  };
  struct PairCounter {
    double bytes = 0;
    double at_s = 0;
    double rate = 0;
  };

  void loop();

  NodeRegistry& registry_;
  std::unique_ptr<ctrl::Store> store_;  // written once by start(), before sampling begins
  const SamplerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                                 // GUARDED_BY(mu_)
  bool started_ = false;                                              // GUARDED_BY(mu_)
  int64_t last_touch_ms_ = 0;                                         // GUARDED_BY(mu_): steady ms
  int64_t last_sample_ms_ = 0;                                        // GUARDED_BY(mu_): steady ms
  std::map<std::string, Reported> reports_;                           // GUARDED_BY(mu_): by node URL
  std::map<std::pair<std::string, std::string>, PairCounter> pairs_;  // GUARDED_BY(mu_): (prefill, decode)
  std::deque<double> times_;                                          // GUARDED_BY(mu_): Unix seconds of each sample
  std::deque<double> link_rate_;                                      // GUARDED_BY(mu_): total link bytes/s per sample
  std::map<std::string, std::deque<double>> kv_use_;  // GUARDED_BY(mu_): per node, aligned with times_ (NaN: none)
  nlohmann::json planner_;                            // GUARDED_BY(mu_)
  std::thread thread_;
  std::mutex sample_mu_;  // one sample at a time (the thread, or a test calling sample_now())
};

}  // namespace tessera::router
