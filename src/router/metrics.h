// Router metrics in Prometheus' text format (prometheus-cpp behind a small facade; its headers stay in
// metrics.cc). Counters and histograms are updated by the proxy; per-node series are built from the node
// registry at each scrape (nodes come and go), through prometheus-cpp too. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "router/node_registry.h"

namespace tessera::router {

class RouterMetrics {
 public:
  RouterMetrics();
  ~RouterMetrics();

  void request_finished(std::string_view endpoint, int status);
  void retry();
  void migration(bool ok);                       // a broken stream continued on another node (migration.h), or not
  void upstream_failure(std::string_view kind);  // "connect", "5xx", "429", "stream"
  void first_byte(double seconds);               // router receipt to the first byte forwarded
  void request_latency(double seconds);
  void pd_pair(std::string_view link);  // a PD pair was chosen; link "shm" or "tcp"

  std::string render(const std::vector<NodeStatus>& nodes, size_t queued, int busy_workers);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::router
