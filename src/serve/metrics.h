// Node metrics in Prometheus' text format (prometheus-cpp behind a small facade, so its headers stay in
// metrics.cc). Counters and histograms are updated by request handlers; gauges are refreshed from the
// engine's stats when /metrics is scraped. Thread-safe.
//
// Two namings of the same engine: vLLM's `vllm:*` series with the label `model_name` (what dashboards, KEDA/HPA
// rules and llm-d/Dynamo autoscalers written for vLLM read; vllm/v1/metrics/loggers.py, v0.11) and Tessera's own
// `tessera_*` series with `model` (PD, KV tiers, grammar, and the older names the fleet dashboard reads).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/pd.h"

namespace tessera::serve {

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  ~Metrics();

  void request_finished(std::string_view endpoint, int status);
  void time_to_first_token(double seconds);
  void inter_token(double seconds, int tokens);  // `tokens` arrived `seconds` after the previous ones
  void request_latency(double seconds);
  // One request (one choice of it) ended in the engine: vLLM's per-request series (finished reason, lengths,
  // queue / prefill / decode / inference time, time per output token).
  void request_done(const engine::RequestOutput& last);

  // The whole exposition, with gauges taken from `stats` and the KV connectors' tiers from `connectors`
  // (Engine::connector_stats()): per connector and tier, the hits (tokens), bytes moved and time spent each way,
  // what the tier holds, evictions and refused blocks; the prefix-cache hit rate counts every cache tier.
  // `pd` (a PD node's counters) and `role` (its current role) add the tessera_pd_* series.
  std::string render(const engine::EngineStats& stats, const std::vector<engine::KvConnectorStats>& connectors = {},
                     const PdStats* pd = nullptr, std::string_view role = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
