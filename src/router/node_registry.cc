#include "router/node_registry.h"

#include <algorithm>

namespace tessera::router {

NodeRegistry::NodeRegistry(const Clock& clock, HealthOptions health, SpeedOptions speed)
    : clock_(clock), speed_(speed), health_(clock, health) {}

bool NodeRegistry::add(const std::string& url, double capacity) {
  std::lock_guard lock(mu_);
  if (nodes_.count(url) != 0) return false;
  Node n;
  n.load.url = url;
  n.load.capacity = capacity > 0 ? capacity : 1;
  n.capacity_set = capacity > 0;
  n.load.tokens_per_s = speed_.initial_tokens_per_s;
  n.last_change_ns = clock_.now_ns();
  nodes_.emplace(url, n);
  health_.add(url);
  return true;
}

bool NodeRegistry::remove(const std::string& url) {
  std::lock_guard lock(mu_);
  health_.remove(url);
  return nodes_.erase(url) != 0;
}

bool NodeRegistry::set_draining(const std::string& url, bool draining) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  it->second.draining = draining;
  return true;
}

bool NodeRegistry::set_node_draining(const std::string& url, bool draining) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end() || it->second.node_draining == draining) return false;
  it->second.node_draining = draining;
  return true;
}

bool NodeRegistry::set_capacity(const std::string& url, double capacity) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end() || capacity <= 0) return false;
  it->second.load.capacity = capacity;
  it->second.capacity_set = true;
  return true;
}

bool NodeRegistry::set_role(const std::string& url, const std::string& role, const std::string& host_id) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  if (!role.empty()) it->second.load.role = role;
  if (!host_id.empty()) it->second.load.host_id = host_id;
  return true;
}

bool NodeRegistry::set_runner(const std::string& url, const std::string& runner) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  it->second.load.runner = runner;
  return true;
}

bool NodeRegistry::set_models(const std::string& url, const std::vector<std::string>& models) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  if (!models.empty()) it->second.load.models = models;
  return true;
}

bool NodeRegistry::may_serve(const std::string& model) const {
  std::lock_guard lock(mu_);
  if (model.empty() || nodes_.empty()) return true;  // no node at all: 503, not 404
  for (const auto& [url, n] : nodes_) {
    const auto& m = n.load.models;
    if (m.empty() || std::find(m.begin(), m.end(), model) != m.end()) return true;
  }
  return false;
}

std::vector<std::string> NodeRegistry::models() const {
  std::lock_guard lock(mu_);
  std::set<std::string> names;
  for (const auto& [url, n] : nodes_) names.insert(n.load.models.begin(), n.load.models.end());
  return {names.begin(), names.end()};
}

std::vector<NodeSnapshot> serving_model(std::vector<NodeSnapshot> nodes, const std::string& model) {
  if (model.empty()) return nodes;
  auto lists = [&](const NodeSnapshot& n) {
    return std::find(n.models.begin(), n.models.end(), model) != n.models.end();
  };
  const bool listed = std::any_of(nodes.begin(), nodes.end(), lists);
  std::erase_if(nodes, [&](const NodeSnapshot& n) { return listed ? !lists(n) : !n.models.empty(); });
  return nodes;
}

bool NodeRegistry::contains(const std::string& url) const {
  std::lock_guard lock(mu_);
  return nodes_.count(url) != 0;
}

std::vector<NodeSnapshot> NodeRegistry::candidates(const std::set<std::string>& exclude) const {
  std::lock_guard lock(mu_);
  std::vector<NodeSnapshot> out;
  for (const auto& [url, n] : nodes_) {
    if (n.draining || n.node_draining || !health_.healthy(url) || exclude.count(url) != 0 || n.load.role == "prefill")
      continue;
    out.push_back(n.load);
  }
  return out;
}

std::vector<NodeSnapshot> NodeRegistry::prefill_candidates(const std::set<std::string>& exclude) const {
  std::lock_guard lock(mu_);
  std::vector<NodeSnapshot> out;
  for (const auto& [url, n] : nodes_) {
    if (n.draining || n.node_draining || !health_.healthy(url) || exclude.count(url) != 0 || n.load.role != "prefill")
      continue;
    out.push_back(n.load);
  }
  return out;
}

NodeStatus NodeRegistry::status_of(const std::string& url, const Node& n) const {
  NodeStatus s;
  s.load = n.load;
  s.healthy = health_.healthy(url);
  s.draining = n.draining || n.node_draining;
  s.capacity_set = n.capacity_set;
  s.requests_total = n.requests_total;
  s.failures_total = n.failures_total;
  s.state_changed_s = static_cast<double>(health_.changed_at_ns(url)) / 1e9;
  return s;
}

std::vector<NodeStatus> NodeRegistry::list() const {
  std::lock_guard lock(mu_);
  std::vector<NodeStatus> out;
  for (const auto& [url, n] : nodes_) out.push_back(status_of(url, n));
  return out;
}

std::optional<NodeStatus> NodeRegistry::status(const std::string& url) const {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return std::nullopt;
  return status_of(url, it->second);
}

void NodeRegistry::account_busy(Node& n, int64_t now) {
  if (n.load.in_flight > 0) n.window_busy_ns += now - n.last_change_ns;
  n.last_change_ns = now;
}

void NodeRegistry::begin(const std::string& url, int64_t tokens) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return;
  Node& n = it->second;
  account_busy(n, clock_.now_ns());
  n.load.in_flight++;
  n.load.outstanding_tokens += tokens;
  n.requests_total++;
}

bool NodeRegistry::finish(const std::string& url, int64_t tokens, int64_t generated, RequestOutcome outcome) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  Node& n = it->second;
  account_busy(n, clock_.now_ns());
  // Clamped: a node removed and re-added under the same URL sees the old registration's requests finish.
  n.load.in_flight = std::max(0, n.load.in_flight - 1);
  n.load.outstanding_tokens = std::max<int64_t>(0, n.load.outstanding_tokens - tokens);
  if (outcome != RequestOutcome::kSuccess) n.failures_total++;
  n.window_tokens += generated;
  if (n.window_busy_ns >= speed_.speed_window_ms * 1'000'000 && n.window_tokens > 0) {
    const double sample = static_cast<double>(n.window_tokens) / (static_cast<double>(n.window_busy_ns) / 1e9);
    n.load.tokens_per_s =
        n.measured ? speed_.ewma_alpha * sample + (1 - speed_.ewma_alpha) * n.load.tokens_per_s : sample;
    n.measured = true;
    n.window_busy_ns = 0;
    n.window_tokens = 0;
  }
  return health_.request_result(url, outcome);
}

std::vector<std::string> NodeRegistry::due_probes() {
  std::lock_guard lock(mu_);
  return health_.due_probes();
}

bool NodeRegistry::probe_result(const std::string& url, bool ok, double capacity) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end()) return false;
  if (ok && capacity > 0 && !it->second.capacity_set) it->second.load.capacity = capacity;
  return health_.probe_result(url, ok);
}

}  // namespace tessera::router
