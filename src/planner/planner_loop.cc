// The planner service (planner_loop.h).
#include "planner/planner_loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/guarded.h"
#include "base/log.h"
#include "ctrl/registry.h"
#include "http/http.h"
#include "solver/live_metrics.h"
#include "solver/spec_yaml.h"

namespace tessera::planner {
namespace {

using json = nlohmann::json;
using Steady = std::chrono::steady_clock;

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Requests a node holds (running + waiting) from its /health; 0 when it does not say.
int node_load(const std::string& url) {
  auto r = http::fetch({.url = url + "/health", .timeout_ms = 1000});
  if (!r.ok() || r->status != 200) return 0;
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object()) return 0;
  auto count = [&](const char* k) {
    return j.contains(k) && j[k].is_number_integer() ? std::clamp<int64_t>(j[k].get<int64_t>(), 0, 1 << 20) : 0;
  };
  return static_cast<int>(count("running") + count("waiting"));
}

}  // namespace

struct PlannerLoop::Impl {
  std::unique_ptr<ctrl::Store> store;
  std::unique_ptr<Launcher> launcher;
  PlannerConfig config;
  const Steady::time_point t0 = Steady::now();

  // The loop's own state: only run_window() touches it, under window_mu.
  std::mutex window_mu;
  std::map<std::string, solver::PromSamples> last_scrape;  // by node address
  double last_scrape_s = 0;
  bool store_write_failed = false;

  // What status_json()/metrics_text() read.
  mutable std::mutex state_mu;
  solver::PlannerState state;   // GUARDED_BY(state_mu)
  solver::Placement placement;  // GUARDED_BY(state_mu)

  std::unique_ptr<http::Server> server;
  std::thread thread;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;  // GUARDED_BY(stop_mu)

  double now_s() const { return std::chrono::duration<double>(Steady::now() - t0).count(); }

  // The node list, as the planner sees it; `infos` by id for the launcher.
  Status read_nodes(std::vector<solver::NodeView>& views, std::map<std::string, ctrl::NodeInfo>& infos) {
    auto kvs = store->range(ctrl::kNodesPrefix);
    if (!kvs.ok()) return kvs.status();
    for (const ctrl::KeyValue& kv : *kvs) {
      auto info = ctrl::NodeInfo::from_json(kv.value);
      if (!info.ok() || info->role == "router" || info->address.empty()) continue;
      const std::vector<std::string>& names = info->models;
      if (!config.served_model.empty() && !names.empty() &&
          std::find(names.begin(), names.end(), config.served_model) == names.end())
        continue;  // another model's node
      solver::NodeView v;
      v.id = info->id;
      v.url = info->address;
      v.role = info->role.empty() ? "both" : info->role;
      v.pool = launcher->pool_of(*info);
      v.load = node_load(v.url);
      views.push_back(v);
      infos[v.id] = *info;
    }
    return ok_status();
  }

  // Scrapes every node; the window covers the nodes scraped both now and last time whose counters did not go
  // back (a restarted node starts a new series).
  Status read_window(const std::vector<solver::NodeView>& nodes, double now, solver::LiveMetrics& live,
                     double& requests) {
    std::map<std::string, solver::PromSamples> scrape;
    Status missing = ok_status();
    for (const solver::NodeView& n : nodes) {
      // Client requests are counted where they are answered: a prefill node's engine counts the prompts it
      // computes for decode nodes a second time, so its counters stay out of the window.
      if (n.role == "prefill") continue;
      auto r = http::fetch({.url = n.url + "/metrics", .timeout_ms = 2000});
      if (!r.ok() || r->status != 200) {
        missing = unavailable(fmt::format("{}/metrics: {}", n.url,
                                          r.ok() ? fmt::format("answered {}", r->status) : r.status().message()));
        continue;
      }
      auto s = solver::parse_prometheus(r->body);
      if (!s.ok()) {
        missing = s.status().with_context(n.url + "/metrics");
        continue;
      }
      scrape[n.url] = std::move(*s);
    }
    std::vector<solver::PromSamples> before, after;
    for (const auto& [url, s] : scrape) {
      auto it = last_scrape.find(url);
      if (it == last_scrape.end()) continue;
      if (solver::serving_counters({s}).requests < solver::serving_counters({it->second}).requests) continue;
      before.push_back(it->second);
      after.push_back(s);
    }
    const bool first = last_scrape.empty();
    const double seconds = now - last_scrape_s;
    last_scrape = std::move(scrape);
    last_scrape_s = now;
    if (!missing.ok()) return missing;
    if (nodes.empty()) return unavailable("the control plane lists no node");
    if (first || after.empty()) return unavailable("first scrape: no window yet");
    const solver::ServingCounters b = solver::serving_counters(before), a = solver::serving_counters(after);
    requests = a.requests - b.requests;
    auto w = solver::window_metrics(b, a, seconds, config.slo);
    if (w.ok()) {
      live = *w;
    } else if (w.status().code() != StatusCode::kFailedPrecondition) {  // FailedPrecondition: a quiet window
      return w.status();
    }
    return ok_status();
  }

  void carry_out(solver::Decision& d, const std::map<std::string, ctrl::NodeInfo>& infos) {
    if (d.action == "keep") return;
    if (!config.act) {
      d.applied = false;
      d.reason += " (planner off: not carried out)";
      return;
    }
    Status s;
    auto node = infos.find(d.node);
    if (d.action == "scale-out") {
      auto started = launcher->scale_out(d.pool, d.to);
      s = started.status();
      if (started.ok()) d.node = *started;
    } else if (node == infos.end()) {
      s = not_found(fmt::format("node {} is no longer registered", d.node));
    } else if (d.action == "re-role") {
      s = launcher->set_role(node->second, d.to);
    } else if (d.action == "scale-in") {
      s = launcher->scale_in(node->second);
    }
    d.applied = s.ok();
    if (!s.ok()) d.reason += "; FAILED: " + s.message();
  }

  void window() {
    std::lock_guard<std::mutex> lock(window_mu);
    solver::PlannerObservation obs;
    obs.now_s = now_s();
    obs.unix_ms = unix_ms_now();
    std::map<std::string, ctrl::NodeInfo> infos;
    obs.ctrl = read_nodes(obs.nodes, infos);
    obs.metrics =
        obs.ctrl.ok() ? read_window(obs.nodes, obs.now_s, obs.live, obs.window_requests) : unavailable("no node list");
    auto workload = solver::observed_workload(config.workload, obs.live, config.eval);
    solver::Evaluator evaluate = [&](const solver::Placement& p) -> Result<solver::Prediction> {
      if (!workload.ok()) return workload.status();
      return solver::simulate_placement(config.fleet, *workload, config.slo, p);
    };
    solver::PlannerState s;
    {
      std::lock_guard<std::mutex> l(state_mu);
      s = state;
    }
    std::vector<solver::Decision> decisions = solver::plan_window(config.fleet, config.policy, s, obs, evaluate);
    for (solver::Decision& d : decisions) {
      carry_out(d, infos);
      log::info("planner: {}{}{}: {} (predicted gain {:.0f}%){}", d.action, d.node.empty() ? "" : " " + d.node,
                d.action == "keep" ? "" : fmt::format(" {} -> {}", d.from, d.to), d.reason, d.predicted_gain * 100,
                d.action == "keep" || d.applied ? "" : " [not applied]");
    }
    solver::record_decisions(config.policy, s, obs.now_s, decisions);
    if (!config.act) s.state = "off";
    const solver::Placement placement_now = solver::current_placement(config.fleet, obs.nodes);
    const std::string history = solver::history_json(s, obs.unix_ms);
    {
      std::lock_guard<std::mutex> l(state_mu);
      state = std::move(s);
      if (obs.ctrl.ok()) placement = placement_now;
    }
    // An entry without a lease: the history outlives a planner restart. Needs the cluster credential.
    Status put = store->put(solver::kPlannerDecisionsKey, history);
    if (!put.ok() && !store_write_failed) log::warn("planner: cannot write its history: {}", put.message());
    if (put.ok() && store_write_failed) log::info("planner: history written again");
    store_write_failed = !put.ok();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(stop_mu);
    while (!stopping) {
      lock.unlock();
      run_guarded(
          "planner window", [&] { window(); }, [] {});
      lock.lock();
      stop_cv.wait_for(lock, std::chrono::duration<double>(config.interval_s), [&] { return stopping; });
    }
  }
};

PlannerLoop::PlannerLoop(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlannerLoop::~PlannerLoop() { stop(); }

Result<std::unique_ptr<PlannerLoop>> PlannerLoop::create(std::unique_ptr<ctrl::Store> store,
                                                         std::unique_ptr<Launcher> launcher, PlannerConfig config) {
  if (!store || !launcher) return invalid_argument("the planner needs a control-plane store and a launcher");
  if (!(config.interval_s > 0)) return invalid_argument("the planner's interval must be positive");
  if (config.fleet.pools.empty()) return invalid_argument("the planner's fleet has no pool");
  if (config.policy.scale && !launcher->caps().scale) {
    return invalid_argument(
        fmt::format("the {} launcher cannot start or stop nodes here: scaling needs `tessera up` with the planner on",
                    launcher->name()));
  }
  auto impl = std::make_unique<Impl>();
  impl->store = std::move(store);
  impl->launcher = std::move(launcher);
  impl->config = std::move(config);
  impl->state.state = impl->config.act ? "holding" : "off";
  impl->state.reason = "starting: no window yet";
  impl->placement.assign(impl->config.fleet.pools.size(), {});
  return std::unique_ptr<PlannerLoop>(new PlannerLoop(std::move(impl)));
}

Result<PlannerConfig> planner_config_from_files(const std::string& fleet, const std::string& workload,
                                                const std::string& slo) {
  PlannerConfig c;
  TS_ASSIGN_OR_RETURN(c.fleet, solver::load_fleet(fleet));
  TS_ASSIGN_OR_RETURN(c.workload, solver::load_workload(workload));
  TS_ASSIGN_OR_RETURN(c.slo, solver::load_slo(slo));
  return c;
}

Status PlannerLoop::start(bool run_thread) {
  Impl* d = impl_.get();
  if (d->config.port >= 0) {
    http::ServerOptions o;
    o.host = d->config.host;
    o.port = static_cast<uint16_t>(d->config.port);
    d->server = std::make_unique<http::Server>(o);
    d->server->route("GET", "/metrics", [this](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
      w->send(200, metrics_text(), "text/plain; version=0.0.4");
    });
    d->server->route("GET", "/status",
                     http::require_cluster_token(d->config.cluster_token,
                                                 [this](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
                                                   w->send(200, status_json());
                                                 }));
    TS_RETURN_IF_ERROR(d->server->start());
  }
  if (run_thread) d->thread = std::thread([d] { d->loop(); });
  return ok_status();
}

uint16_t PlannerLoop::port() const { return impl_->server ? impl_->server->port() : 0; }

void PlannerLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->server) impl_->server->stop(1000);
}

void PlannerLoop::run_window() { impl_->window(); }

std::string PlannerLoop::status_json() const {
  std::lock_guard<std::mutex> lock(impl_->state_mu);
  return solver::history_json(impl_->state, unix_ms_now());
}

std::string PlannerLoop::metrics_text() const {
  std::lock_guard<std::mutex> lock(impl_->state_mu);
  return solver::planner_metrics_text(impl_->state, impl_->placement, impl_->config.fleet);
}

}  // namespace tessera::planner
