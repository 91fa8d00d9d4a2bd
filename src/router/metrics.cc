#include "router/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tessera::router {

namespace p = prometheus;

struct RouterMetrics::Impl {
  std::shared_ptr<p::Registry> registry = std::make_shared<p::Registry>();
  p::Family<p::Counter>& requests = p::BuildCounter()
                                        .Name("tessera_router_requests_total")
                                        .Help("Requests answered by the router, by endpoint and status")
                                        .Register(*registry);
  p::Family<p::Counter>& failures = p::BuildCounter()
                                        .Name("tessera_router_upstream_failures_total")
                                        .Help("Failed upstream attempts by kind (connect, 5xx, 429, stream)")
                                        .Register(*registry);
  p::Family<p::Counter>& pd_pairs = p::BuildCounter()
                                        .Name("tessera_router_pd_pairs_total")
                                        .Help("Prefill/decode pairs chosen, by the link between them (shm, tcp)")
                                        .Register(*registry);
  p::Counter& retries = p::BuildCounter()
                            .Name("tessera_router_retries_total")
                            .Help("Requests sent again to another node")
                            .Register(*registry)
                            .Add({});
  p::Family<p::Counter>& migrations = p::BuildCounter()
                                          .Name("tessera_router_stream_migrations_total")
                                          .Help("Broken streams continued on another node, by result (ok, failed)")
                                          .Register(*registry);
  p::Histogram& ttfb = p::BuildHistogram()
                           .Name("tessera_router_time_to_first_byte_seconds")
                           .Help("From request receipt to the first response byte forwarded")
                           .Register(*registry)
                           .Add({}, p::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                                   0.25, 0.5, 1, 2.5, 5, 10});
  p::Histogram& latency = p::BuildHistogram()
                              .Name("tessera_router_request_seconds")
                              .Help("From request receipt to the last byte forwarded")
                              .Register(*registry)
                              .Add({}, p::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                      5, 10, 30, 60, 120});
};

RouterMetrics::RouterMetrics() : impl_(std::make_unique<Impl>()) {}
RouterMetrics::~RouterMetrics() = default;

void RouterMetrics::request_finished(std::string_view endpoint, int status) {
  impl_->requests.Add({{"endpoint", std::string(endpoint)}, {"status", std::to_string(status)}}).Increment();
}
void RouterMetrics::retry() { impl_->retries.Increment(); }
void RouterMetrics::migration(bool ok) { impl_->migrations.Add({{"result", ok ? "ok" : "failed"}}).Increment(); }
void RouterMetrics::upstream_failure(std::string_view kind) {
  impl_->failures.Add({{"kind", std::string(kind)}}).Increment();
}
void RouterMetrics::first_byte(double seconds) { impl_->ttfb.Observe(seconds); }
void RouterMetrics::request_latency(double seconds) { impl_->latency.Observe(seconds); }
void RouterMetrics::pd_pair(std::string_view link) { impl_->pd_pairs.Add({{"link", std::string(link)}}).Increment(); }

std::string RouterMetrics::render(const std::vector<NodeStatus>& nodes, size_t queued, int busy_workers) {
  // The per-node gauges live in a registry of this scrape only: a node that left the registry is not reported.
  p::Registry now;
  p::BuildGauge()
      .Name("tessera_router_queued_requests")
      .Help("Requests waiting for a proxy worker")
      .Register(now)
      .Add({})
      .Set(static_cast<double>(queued));
  p::BuildGauge()
      .Name("tessera_router_busy_workers")
      .Help("Proxy workers holding an upstream request")
      .Register(now)
      .Add({})
      .Set(busy_workers);
  struct Gauge {
    const char* name;
    const char* help;
    double (*get)(const NodeStatus&);
  };
  const Gauge gauges[] = {
      {"tessera_router_node_healthy", "1 when the node is in rotation by health",
       [](const NodeStatus& s) { return s.healthy ? 1.0 : 0.0; }},
      {"tessera_router_node_draining", "1 when the node takes no new requests",
       [](const NodeStatus& s) { return s.draining ? 1.0 : 0.0; }},
      {"tessera_router_node_in_flight", "Requests routed to the node and not finished",
       [](const NodeStatus& s) { return static_cast<double>(s.load.in_flight); }},
      {"tessera_router_node_outstanding_tokens", "Prompt + requested output tokens in flight on the node",
       [](const NodeStatus& s) { return static_cast<double>(s.load.outstanding_tokens); }},
      {"tessera_router_node_tokens_per_second", "Measured generation speed (EWMA)",
       [](const NodeStatus& s) { return s.load.tokens_per_s; }},
  };
  for (const auto& g : gauges) {
    auto& family = p::BuildGauge().Name(g.name).Help(g.help).Register(now);
    for (const auto& n : nodes) family.Add({{"node", n.load.url}}).Set(g.get(n));
  }
  // A running total the registry keeps per node: a counter (it restarts with the node's registration).
  auto& sent =
      p::BuildCounter().Name("tessera_router_node_requests_total").Help("Requests sent to the node").Register(now);
  for (const auto& n : nodes) sent.Add({{"node", n.load.url}}).Increment(static_cast<double>(n.requests_total));
  std::vector<p::MetricFamily> families = impl_->registry->Collect();
  for (p::MetricFamily& f : now.Collect()) families.push_back(std::move(f));
  return p::TextSerializer().Serialize(families);
}

}  // namespace tessera::router
