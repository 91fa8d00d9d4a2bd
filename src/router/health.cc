#include "router/health.h"

namespace tessera::router {

void HealthTracker::add(const std::string& url) {
  Entry e;
  e.next_probe_ns = clock_.now_ns();
  e.changed_ns = clock_.now_ns();
  nodes_.emplace(url, e);
}

void HealthTracker::remove(const std::string& url) { nodes_.erase(url); }

bool HealthTracker::healthy(const std::string& url) const {
  auto it = nodes_.find(url);
  return it != nodes_.end() && it->second.healthy;
}

int64_t HealthTracker::changed_at_ns(const std::string& url) const {
  auto it = nodes_.find(url);
  return it == nodes_.end() ? 0 : it->second.changed_ns;
}

std::vector<std::string> HealthTracker::due_probes() {
  std::vector<std::string> due;
  const int64_t now = clock_.now_ns();
  for (auto& [url, e] : nodes_) {
    if (e.probing || e.next_probe_ns > now) continue;
    e.probing = true;
    due.push_back(url);
  }
  return due;
}

bool HealthTracker::set_healthy(Entry& e, bool healthy) {
  if (e.healthy == healthy) return false;
  e.healthy = healthy;
  e.changed_ns = clock_.now_ns();
  return true;
}

bool HealthTracker::probe_result(const std::string& url, bool ok) {
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  Entry& e = it->second;
  e.probing = false;
  e.next_probe_ns = clock_.now_ns() + options_.probe_interval_ms * 1'000'000;
  if (ok) {
    e.probe_failures = 0;
    ++e.probe_successes;
    if (!e.healthy && e.probe_successes >= options_.healthy_threshold) {
      e.request_failures = 0;
      return set_healthy(e, true);
    }
    return false;
  }
  e.probe_successes = 0;
  ++e.probe_failures;
  if (e.probe_failures >= options_.unhealthy_threshold) return set_healthy(e, false);
  return false;
}

bool HealthTracker::request_result(const std::string& url, RequestOutcome outcome) {
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  Entry& e = it->second;
  if (outcome == RequestOutcome::kSuccess) {
    e.request_failures = 0;
    return false;
  }
  ++e.request_failures;
  if (e.request_failures >= options_.consecutive_failures) {
    // Probes must now see the node well again, from scratch, before it comes back.
    e.probe_successes = 0;
    return set_healthy(e, false);
  }
  return false;
}

}  // namespace tessera::router
