// Gateway: the router's HTTP face. An OpenAI-compatible proxy for /v1/completions and /v1/chat/completions
// in front of the registered nodes, plus /v1/models (the union of the nodes' models), /health, /metrics and
// the node management API. One router fronts several models: a request goes to the nodes serving its `model`
// (PD pairs too), and a model no node serves is answered 404 model_not_found in OpenAI's shape.
// The node management API:
//   GET  /admin/nodes                      list nodes with health and load
//   POST /admin/nodes         {"url", "capacity"?}   add
//   POST /admin/nodes/remove  {"url"}               remove
//   POST /admin/nodes/drain   {"url", "drain"?}     stop (or, with "drain": false, resume) sending new requests
//
// Every body is validated here with the node's own parser (api::parse_request), so a malformed request is
// answered with an OpenAI-shaped 400 without reaching any node. Responses stream through as they arrive
// (chunked, never buffered); non-streaming answers are read whole so that they can be retried. Before the
// first response byte, a connect error, a 5xx, or a 429 goes to another node (at most `max_attempts` nodes,
// exponential backoff); once bytes have streamed, a failure ends the stream with an SSE error event and
// [DONE]. A client that disconnects closes the upstream connection, which cancels the request on the node.
// When a node leaves rotation (probes or passive ejection), the exchanges still open on it are abandoned:
// those that forwarded nothing yet are retried elsewhere, streams already under way end with the SSE error
// event, so no request waits out the upstream timeout on a node that stopped answering.
// x-request-id is taken from the client (or made up), sent to the node and returned. Internal fields stay
// internal: a client body carrying `tessera_resume` gets 400, and no client header other than x-request-id and
// x-session-id reaches a node (the router sets its own x-tessera-* headers, with the cluster token).
//
// Threads: HTTP I/O on `http.io_threads` threads; each proxied request holds one thread of a bounded pool
// (`workers` threads, `max_queue` waiting; beyond that 503) for its blocking upstream call; one health
// thread runs the probes. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "http/http.h"
#include "router/health.h"
#include "router/kv_event_index.h"
#include "router/live_stats.h"
#include "router/membership.h"
#include "router/node_registry.h"
#include "router/pd_pairing.h"
#include "router/strategy.h"

namespace tessera::router {

struct GatewayOptions {
  http::ServerOptions http;
  std::string strategy = "round_robin";
  StrategyOptions strategy_options;
  HealthOptions health;
  std::vector<std::string> api_keys;  // empty: no authentication
  // The cluster credential (docs/security.md): required on /admin/* (instead of an API key) and sent to the
  // nodes on every call, which is what lets them honour the router's internal fields. Unconfigured: /admin/*
  // takes the API keys, as the public routes do.
  ClusterToken cluster_token;
  std::string upstream_tls_ca_file;  // CA file trusted for https:// nodes (empty: the system's)
  int workers = 64;
  size_t max_queue = 4096;
  int max_attempts = 3;              // nodes tried per request
  int backoff_ms = 10;               // before the 2nd attempt; doubles each time, at most 500 ms
  int upstream_timeout_ms = 600000;  // whole upstream exchange
  bool upstream_keepalive = true;    // reuse connections to the nodes (http::ConnectionPool)
  // PD mode: when prefill nodes are known, choose (decode, prefill) pairs jointly (pd_pairing.h).
  bool pd_pairing = true;
  PairingOptions pairing;
  // Prompt text -> token ids, for the prefix strategies (the model's tokenizer). Unset: prompts given as
  // text are hashed by bytes (consistent across requests, but not the nodes' token blocks).
  std::function<std::vector<int32_t>(std::string_view)> tokenize;
  std::string tokenize_model;  // the model `tokenize` is the tokenizer of; empty: every model's
  // The prefix strategies (prefix_cache, kv_aware) read each node's KV events (kv_event_index.h) and match a
  // prompt's blocks against what the node really holds; off: only the router's own routing history.
  bool kv_events = true;
  int kv_events_interval_ms = 100;
};

class Gateway final : public MembershipListener {
 public:
  // InvalidArgument for an unknown strategy (listing the known ones).
  static Result<std::unique_ptr<Gateway>> create(GatewayOptions options);
  ~Gateway() override;

  Status start();
  uint16_t port() const;
  void stop();

  void on_node_added(const NodeSpec& node) override;
  void on_node_removed(const std::string& url) override;
  void on_node_updated(const NodeSpec& node) override;
  NodeRegistry& registry();
  // Per-second history of finished requests (TTFT, TPOT, tokens), for the dashboard.
  LiveStats& live_stats();
  const GatewayOptions& options() const;
  // The HTTP server, for another service to mount its routes on before start() (the hosted control plane).
  http::Server& http_server();

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::router
