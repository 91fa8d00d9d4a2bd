// Node metrics in Prometheus' text format (prometheus-cpp behind a small facade, so its headers stay in
// metrics.cc). Counters and histograms are updated by request handlers; gauges are refreshed from the
// engine's stats when /metrics is scraped. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tessera::serve {

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  ~Metrics();

  void request_finished(std::string_view endpoint, int status);
  void time_to_first_token(double seconds);
  void inter_token(double seconds, int tokens);  // `tokens` arrived `seconds` after the previous ones
  void request_latency(double seconds);

  // The whole exposition, with gauges taken from `stats` and the KV connectors' tiers from `connectors`
  // (Engine::connector_stats()): per connector and tier, the hits (tokens), bytes moved and time spent each way,
  // what the tier holds, evictions and refused blocks; the prefix-cache hit rate counts every cache tier.
  std::string render(const engine::EngineStats& stats, const std::vector<engine::KvConnectorStats>& connectors = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
