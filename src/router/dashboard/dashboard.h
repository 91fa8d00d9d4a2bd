// Dashboard: the fleet dashboard the router serves (issue 18 item 4; docs/dashboard.md).
//   GET /dashboard                  the page (web/dashboard/index.html)
//   GET /dashboard/assets/NAME      its scripts and styles, uPlot included (assets.h)
//   GET /dashboard/api/state        JSON the page polls: nodes (role, backend, device, health, load, KV use),
//                                   per-second TTFT / TPOT / throughput from the gateway's LiveStats, link
//                                   traffic between prefill and decode nodes and KV use over time
//                                   (fleet_sampler.h), and the planner's decisions (planner_view.h)
// Access is that of the public API: with --api-key set, every dashboard route needs a key, as
// "Authorization: Bearer KEY" or as the password of HTTP Basic authentication (what a browser can send to a
// page; the 401 asks for it); the cluster token is accepted too (x-tessera-cluster-token, or as the Basic
// password). Without API keys the routes are open, like /v1/* and /metrics, which show the same facts.
// Responses carry a strict Content-Security-Policy (scripts and styles from this origin only, no inline code,
// no eval), nosniff, and ETag revalidation for the assets.
//
// Threads: handlers run on the HTTP io threads and never block (they read the sampler's last snapshot); the
// sampler has its own thread. mount() before the server starts; start()/stop() around it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "ctrl/store.h"
#include "http/http.h"
#include "router/dashboard/fleet_sampler.h"
#include "router/gateway.h"

namespace tessera::router {

struct DashboardOptions {
  std::vector<std::string> api_keys;  // empty: open
  ClusterToken cluster_token;         // accepted as a credential; sent to the nodes
  std::string tls_ca_file;
  SamplerOptions sampler;     // its cluster_token and tls_ca_file are filled from the two above
  int history_seconds = 300;  // TTFT/TPOT/throughput seconds served
};

class Dashboard {
 public:
  // `gateway` must outlive the dashboard.
  Dashboard(Gateway& gateway, DashboardOptions options);
  ~Dashboard();

  // Adds the routes; before `server` starts.
  void mount(http::Server& server);
  // Starts sampling; `store` (may be null) is where the planner's history is read.
  void start(std::unique_ptr<ctrl::Store> store);
  void stop();

  // The body of GET /dashboard/api/state.
  nlohmann::json state();

 private:
  bool allowed(const http::Request& r) const;

  Gateway& gateway_;
  DashboardOptions options_;
  FleetSampler sampler_;
};

}  // namespace tessera::router
