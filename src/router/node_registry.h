// NodeRegistry: the nodes the router may send requests to, their load and their health.
//
// Load accounting: begin() when a request is sent to a node, finish() when it is over; in between it counts
// as in flight with its prompt + requested output tokens outstanding. finish() also feeds the node's measured
// speed: tokens generated per second of time the node had work (an EWMA over windows of at least
// `speed_window_ms`), which least_latency divides queued work by. Health comes from a HealthTracker (active
// probes + passive outlier detection) kept under the same lock. A draining node finishes what it has but gets
// nothing new. candidates() is what strategies choose from: healthy, not draining, not prefill-only, sorted
// by URL; prefill_candidates() are the healthy prefill-only nodes the PD pairing chooses from.
//
// Models: each node serves the model names its control-plane entry or its /health lists. A request goes only to
// nodes serving its `model` (serving_model()); so one router fronts several models, and a PD pair never
// crosses models. A node whose names are not known yet (added by URL, before its first /health answer) may take
// a request only when no known node serves its model.
//
// Thread-safe (one mutex); the clock is injected so tests drive time by hand.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "router/health.h"
#include "router/strategy.h"

namespace tessera::router {

struct NodeStatus {
  NodeSnapshot load;
  bool healthy = true;
  bool draining = false;
  bool capacity_set = false;  // capacity given explicitly (else learnt from /health)
  uint64_t requests_total = 0;
  uint64_t failures_total = 0;
  double state_changed_s = 0;  // clock seconds of the last health change
};

struct SpeedOptions {
  double initial_tokens_per_s = 100;  // before anything was measured
  int64_t speed_window_ms = 500;      // busy time gathered before a speed sample
  double ewma_alpha = 0.3;            // weight of the newest sample
};

class NodeRegistry {
 public:
  NodeRegistry(const Clock& clock, HealthOptions health = {}, SpeedOptions speed = {});

  // False when the URL is already registered. capacity <= 0: not given (1 until /health reports one).
  bool add(const std::string& url, double capacity = 0);
  bool remove(const std::string& url);
  bool set_draining(const std::string& url, bool draining);
  // The node itself says it is draining (its /health or a 503 with x-tessera-draining): like set_draining, but
  // kept apart from the operator's choice, and cleared when the node reports healthy again (a restart). True
  // when it changed.
  bool set_node_draining(const std::string& url, bool draining);
  bool set_capacity(const std::string& url, double capacity);
  // Role ("both", "prefill", "decode") and host id; an empty argument leaves that field as it is.
  bool set_role(const std::string& url, const std::string& role, const std::string& host_id);
  // What the node runs ("generate" or "pooling"), as its /health says; false for an unknown URL.
  bool set_runner(const std::string& url, const std::string& runner);
  // The model names the node serves; an empty list leaves them as they are. False for an unknown URL.
  bool set_models(const std::string& url, const std::vector<std::string>& models);
  // Whether `model` has a home here: some node lists it, some node's names are not known yet (it may), or there
  // are no nodes at all (the answer is then 503, nothing in rotation). A
  // request for a model without one is answered 404 model_not_found without trying any node.
  bool may_serve(const std::string& model) const;
  // Every name some node lists, sorted.
  std::vector<std::string> models() const;
  bool contains(const std::string& url) const;

  // Healthy, not draining, not in `exclude`; sorted by URL.
  std::vector<NodeSnapshot> candidates(const std::set<std::string>& exclude = {}) const;
  std::vector<NodeSnapshot> prefill_candidates(const std::set<std::string>& exclude = {}) const;
  std::vector<NodeStatus> list() const;
  std::optional<NodeStatus> status(const std::string& url) const;

  void begin(const std::string& url, int64_t tokens);
  // `tokens` as given to begin(); `generated` output tokens the node produced; returns true when the node's
  // health changed.
  bool finish(const std::string& url, int64_t tokens, int64_t generated, RequestOutcome outcome);

  // Health probes: which are due (marked as running), and their results. `capacity` (> 0) is what the node
  // reported (KV blocks) and becomes its capacity unless one was set explicitly.
  std::vector<std::string> due_probes();
  bool probe_result(const std::string& url, bool ok, double capacity = 0);
  const HealthOptions& health_options() const { return health_.options(); }

 private:
  struct Node {
    NodeSnapshot load;
    bool capacity_set = false;
    bool draining = false;
    bool node_draining = false;
    uint64_t requests_total = 0;
    uint64_t failures_total = 0;
    int64_t last_change_ns = 0;  // last in_flight change, for busy time
    int64_t window_busy_ns = 0;  // busy time in the current speed window
    int64_t window_tokens = 0;   // tokens generated in it
    bool measured = false;
  };
  void account_busy(Node& n, int64_t now);
  NodeStatus status_of(const std::string& url, const Node& n) const;

  const Clock& clock_;
  SpeedOptions speed_;
  mutable std::mutex mu_;
  std::map<std::string, Node> nodes_;  // GUARDED_BY(mu_)
  HealthTracker health_;               // GUARDED_BY(mu_)
};

// The nodes of `nodes` that serve `model`: those that list it, or, when none does, those whose names are not
// known yet. An empty model keeps every node. Order is kept.
std::vector<NodeSnapshot> serving_model(std::vector<NodeSnapshot> nodes, const std::string& model);

}  // namespace tessera::router
