#include "router/prober.h"

#include <limits>

#include <fmt/format.h>

#include "api/health.h"
#include "api/pd_messages.h"
#include "api/resume.h"
#include "base/log.h"

namespace tessera::router {

bool draining_answer(const http::Response& r) {
  auto it = r.headers.find(std::string(api::kDrainingHeader));
  return r.status == 503 && it != r.headers.end() && it->second == "1";
}

Prober::Prober(NodeRegistry& registry, ProberOptions options)
    : registry_(registry),
      options_(std::move(options)),
      pool_("router probe", options_.threads, std::numeric_limits<size_t>::max()) {}

Prober::~Prober() { stop(); }

void Prober::start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { loop(); });
}

void Prober::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prober::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    for (const std::string& url : registry_.due_probes()) {
      if (!pool_.submit([this, url] { probe(url); })) registry_.probe_result(url, false, 0);
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_; });
  }
  lock.unlock();
  pool_.drop_queued();
}

// A node added without a role (--nodes, the admin API) says what it is on GET /internal/pd/info; a node without
// that route serves whole requests.
void Prober::learn_role(const std::string& url) {
  auto known = registry_.status(url);
  if (!known || !known->load.role.empty()) return;
  http::ClientRequest req;
  http::add_cluster_token(req.headers, options_.cluster_token);
  req.tls_ca_file = options_.tls_ca_file;
  req.url = url + "/internal/pd/info";
  req.timeout_ms = options_.timeout_ms;
  auto r = http::fetch(req);
  if (!r.ok()) return;
  if (r->status == 404) {
    registry_.set_role(url, "both", "");
    return;
  }
  auto info = api::parse_pd_info(r->body);
  if (r->status != 200 || !info.ok()) return;
  registry_.set_role(url, info->role, info->host_id);
  log::info("router: node {} has role {}", url, info->role);
}

void Prober::probe(const std::string& url) {
  http::ClientRequest req;
  http::add_cluster_token(req.headers, options_.cluster_token);
  req.tls_ca_file = options_.tls_ca_file;
  req.url = url + "/health";
  req.timeout_ms = options_.timeout_ms;
  auto r = http::fetch(req);
  const bool ok = r.ok() && r->status == 200;
  if (r.ok() && draining_answer(*r)) {
    // Alive and finishing its work: out of the candidates, not ejected (which would cancel its streams).
    if (registry_.set_node_draining(url, true)) log::info("router: node {} is draining", url);
    registry_.probe_result(url, true);
    return;
  }
  if (ok) {
    registry_.set_node_draining(url, false);
    learn_role(url);
    if (const std::string runner = api::health_runner(r->body); !runner.empty()) registry_.set_runner(url, runner);
    registry_.set_models(url, api::health_models(r->body));
  }
  // Capacity steers routing: only a plausible block count is believed (api/health.h).
  const double capacity = ok ? api::health_capacity(r->body) : 0;
  if (registry_.probe_result(url, ok, capacity)) {
    if (ok) {
      log::info("router: node {} back in rotation", url);
    } else {
      log::warn("router: node {} out of rotation: {}", url,
                r.ok() ? fmt::format("/health answered {}", r->status) : r.status().message());
      if (options_.on_out_of_rotation) options_.on_out_of_rotation(url);
    }
  }
}

}  // namespace tessera::router
