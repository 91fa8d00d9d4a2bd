// What the dashboard learns from one node: its GET /health body (backend, device, KV blocks, queue) and the
// few samples of its GET /metrics it draws (KV bytes received over the link, in total and per prefill node).
// Both bodies come from another process and are read as untrusted input: a wrong type, a negative or
// non-finite number, or an oversized label is ignored, never believed and never a crash. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera::router {

struct NodeReport {
  std::string model, backend, device;                 // empty: the node did not say
  int64_t kv_blocks_used = -1, kv_blocks_total = -1;  // -1: unknown
  int64_t waiting = -1, running = -1;
  double kv_bytes_received = -1;  // tessera_pd_kv_bytes_total: decode nodes only; -1: not exposed
  // tessera_pd_kv_bytes_from_total{prefill="URL"}: bytes received from each prefill node.
  std::map<std::string, double> kv_bytes_from;
  // tessera_prefix_cache_tier_hit_rate{tier}: prompt tokens each cache tier supplied / tokens looked up (device from
  // the engine, host and disk from the host connector); absent: the node does not have that tier.
  std::map<std::string, double> tier_hit_rate;
};

// Reads a node's /health JSON into `out`; InvalidArgument when it is not a JSON object.
Status parse_node_health(std::string_view body, NodeReport& out);
// Reads the link counters and the prefix cache's hit rate per tier from a node's Prometheus text. Lines it does not
// know are skipped.
void parse_node_metrics(std::string_view text, NodeReport& out);

// One Prometheus text sample: `name{label="v",...} value`. False for comments, blank or malformed lines.
struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
bool parse_prom_line(std::string_view line, PromSample& out);

}  // namespace tessera::router
