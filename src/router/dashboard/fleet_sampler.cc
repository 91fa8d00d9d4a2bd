// FleetSampler (fleet_sampler.h). Link rates come from counter deltas between two samples of the same
// (prefill, decode) pair; a counter that went down (the decode node restarted) restarts the pair at 0 B/s
// rather than showing a negative rate.
#include "router/dashboard/fleet_sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <vector>

#include <fmt/core.h>

#include "base/guarded.h"
#include "base/log.h"
#include "http/http.h"
#include "router/dashboard/planner_view.h"
#include "router/live_stats.h"

namespace tessera::router {
namespace {

constexpr size_t kFanout = 16;  // nodes asked at once: the router's thread count must not grow with the fleet

using json = nlohmann::json;

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double wall_s() { return static_cast<double>(wall_clock().now_ns()) / 1e9; }

json nan_as_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

}  // namespace

FleetSampler::FleetSampler(NodeRegistry& registry, SamplerOptions options)
    : registry_(registry), options_(std::move(options)), planner_(planner_no_ctrl()) {}

FleetSampler::~FleetSampler() { stop(); }

void FleetSampler::start(std::unique_ptr<ctrl::Store> store) {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  store_ = std::move(store);
  if (store_) planner_ = planner_absent();
  thread_ = std::thread([this] { loop(); });
}

void FleetSampler::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FleetSampler::touch() {
  bool due = false;
  {
    std::lock_guard lock(mu_);
    const int64_t now = steady_ms();
    due = now - last_touch_ms_ > options_.watch_ms || now - last_sample_ms_ >= options_.interval_ms;
    last_touch_ms_ = now;
  }
  if (due) cv_.notify_all();
}

void FleetSampler::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const int64_t now = steady_ms();
    const bool watched = last_touch_ms_ > 0 && now - last_touch_ms_ <= options_.watch_ms;
    if (watched && now - last_sample_ms_ >= options_.interval_ms) {
      lock.unlock();
      // No exception may leave the thread (std::async throws when no thread can be made): a failed sample is
      // logged and the next one comes an interval later.
      run_guarded("dashboard: sampling the fleet", [this] { sample_now(); });
      lock.lock();
      last_sample_ms_ = steady_ms();
      continue;
    }
    // Asleep until the next sample is due, or indefinitely (until touch()) while nobody looks.
    const int64_t wait = watched ? options_.interval_ms - (now - last_sample_ms_) : options_.watch_ms;
    cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, wait)));
  }
}

void FleetSampler::sample_now() {
  std::lock_guard one(sample_mu_);
  const std::vector<NodeStatus> nodes = registry_.list();
  std::vector<Reported> got(nodes.size());
  auto ask = [this](const std::string& url, Reported& out) {
    auto get = [&](const char* path) {
      http::ClientRequest req;
      http::add_cluster_token(req.headers, options_.cluster_token);
      req.tls_ca_file = options_.tls_ca_file;
      req.url = url + path;
      req.timeout_ms = options_.timeout_ms;
      return http::fetch(req);
    };
    out.sampled_ms = wall_clock().now_ns() / 1000000;
    auto health = get("/health");
    if (!health.ok()) {
      out.error = health.status().message();
      return;
    }
    if (health->status != 200) out.error = fmt::format("/health answered {}", health->status);
    if (Status s = parse_node_health(health->body, out.report); !s.ok() && out.error.empty()) out.error = s.message();
    auto metrics = get("/metrics");
    if (metrics.ok() && metrics->status == 200) parse_node_metrics(metrics->body, out.report);
  };
  for (size_t at = 0; at < nodes.size(); at += kFanout) {
    std::vector<std::future<void>> batch;
    for (size_t i = at; i < std::min(nodes.size(), at + kFanout); ++i) {
      batch.push_back(std::async(std::launch::async, [&, i] { ask(nodes[i].load.url, got[i]); }));
    }
    for (auto& f : batch) f.get();
  }
  json planner = planner_no_ctrl();
  if (store_) {
    auto kv = store_->range(std::string(kPlannerDecisionsKey));
    if (!kv.ok()) {
      planner = planner_unreachable(kv.status().message());
    } else {
      planner = planner_absent();
      for (const auto& e : *kv) {
        if (e.key == kPlannerDecisionsKey) planner = parse_planner_history(e.value);
      }
    }
  }

  const double now = wall_s();
  std::lock_guard lock(mu_);
  last_sample_ms_ = steady_ms();
  planner_ = std::move(planner);
  std::map<std::string, Reported> reports;
  std::map<std::pair<std::string, std::string>, PairCounter> pairs;
  double link_total = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string& url = nodes[i].load.url;
    const NodeReport& r = got[i].report;
    // Per prefill peer where the node says; a node exposing only its total shows as one link from "".
    std::map<std::string, double> from = r.kv_bytes_from;
    if (from.empty() && r.kv_bytes_received > 0) from[""] = r.kv_bytes_received;
    for (const auto& [prefill, bytes] : from) {
      const auto key = std::make_pair(prefill, url);
      PairCounter c{bytes, now, 0};
      if (auto it = pairs_.find(key); it != pairs_.end() && bytes >= it->second.bytes && now > it->second.at_s) {
        c.rate = (bytes - it->second.bytes) / (now - it->second.at_s);
      }
      link_total += c.rate;
      pairs[key] = c;
    }
    reports[url] = std::move(got[i]);
  }
  reports_ = std::move(reports);
  pairs_ = std::move(pairs);
  const auto keep = static_cast<size_t>(std::max(1, options_.history_points));
  times_.push_back(now);
  link_rate_.push_back(link_total);
  for (const auto& n : nodes) {
    const NodeReport& r = reports_[n.load.url].report;
    auto& series = kv_use_[n.load.url];
    series.resize(times_.size() - 1, std::numeric_limits<double>::quiet_NaN());  // a node new to the chart
    series.push_back(r.kv_blocks_total > 0 ? static_cast<double>(r.kv_blocks_used) / r.kv_blocks_total
                                           : std::numeric_limits<double>::quiet_NaN());
  }
  for (auto it = kv_use_.begin(); it != kv_use_.end();) {  // nodes gone from the registry leave the chart
    it = reports_.count(it->first) ? std::next(it) : kv_use_.erase(it);
  }
  while (times_.size() > keep) {
    times_.pop_front();
    link_rate_.pop_front();
  }
  for (auto& [url, series] : kv_use_) {
    while (series.size() > times_.size()) series.pop_front();
  }
}

json FleetSampler::snapshot() const {
  std::lock_guard lock(mu_);
  json nodes = json::object();
  for (const auto& [url, rep] : reports_) {
    const NodeReport& r = rep.report;
    auto opt = [](int64_t v) { return v >= 0 ? json(v) : json(nullptr); };
    nodes[url] = {{"model", r.model},
                  {"backend", r.backend},
                  {"device", r.device},
                  {"kv_blocks_used", opt(r.kv_blocks_used)},
                  {"kv_blocks_total", opt(r.kv_blocks_total)},
                  {"kv_use", r.kv_blocks_total > 0 ? json(static_cast<double>(r.kv_blocks_used) / r.kv_blocks_total)
                                                   : json(nullptr)},
                  {"waiting", opt(r.waiting)},
                  {"running", opt(r.running)},
                  {"kv_bytes_received", r.kv_bytes_received >= 0 ? json(r.kv_bytes_received) : json(nullptr)},
                  {"prefix_hit_rate", r.tier_hit_rate.empty() ? json(nullptr) : json(r.tier_hit_rate)},
                  {"sampled_ms", rep.sampled_ms},
                  {"error", rep.error}};
  }
  json pairs = json::array();
  for (const auto& [key, c] : pairs_) {
    pairs.push_back(
        {{"prefill", key.first}, {"decode", key.second}, {"bytes_total", c.bytes}, {"bytes_per_s", c.rate}});
  }
  json kv = {{"t", json(times_)}};
  json per_node = json::object();
  for (const auto& [url, series] : kv_use_) {
    json s = json::array();
    for (double v : series) s.push_back(nan_as_null(v));
    per_node[url] = std::move(s);
  }
  kv["nodes"] = std::move(per_node);
  return {{"nodes", std::move(nodes)},
          {"link", {{"t", json(times_)}, {"bytes_per_s", json(link_rate_)}, {"pairs", std::move(pairs)}}},
          {"kv", std::move(kv)},
          {"planner", planner_}};
}

}  // namespace tessera::router
