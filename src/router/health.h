// Health: whether each node is in rotation, from active probes of its /health and from what real requests
// saw (passive outlier detection).
//
// Pure logic with an injected clock: the caller asks which probes are due, runs them wherever it likes, and
// reports the results; it reports request outcomes the same way. No sockets, no threads, no sleeping, so
// every timing rule is testable with a ManualClock.
//
// Rules (defaults give a dead node out of rotation within 3 s even with no traffic: probes every 1 s, each
// with a 0.5 s timeout, 2 consecutive failures eject; with traffic, 3 consecutive connect failures or 5xx
// answers eject at once). An ejected node comes back only through probes: `healthy_threshold` consecutive
// successful probes re-admit it. New nodes start healthy and are probed at once.
//
// Not thread-safe: the owner (NodeRegistry) serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"

namespace tessera::router {

struct HealthOptions {
  int64_t probe_interval_ms = 1000;
  int64_t probe_timeout_ms = 500;
  int unhealthy_threshold = 2;   // consecutive failed probes that eject
  int healthy_threshold = 2;     // consecutive good probes that re-admit
  int consecutive_failures = 3;  // consecutive failed requests (connect error or 5xx) that eject
};

enum class RequestOutcome {
  kSuccess,       // an answer below 500 (429 included: the node is alive, only busy)
  kServerError,   // 5xx
  kConnectError,  // could not connect, or the connection broke
};

class HealthTracker {
 public:
  HealthTracker(const Clock& clock, HealthOptions options) : clock_(clock), options_(options) {}

  const HealthOptions& options() const { return options_; }
  void add(const std::string& url);
  void remove(const std::string& url);
  bool healthy(const std::string& url) const;

  // Nodes whose probe is due now; each is marked as probing until probe_result() (no double probes).
  std::vector<std::string> due_probes();
  // Returns true when the node's health changed.
  bool probe_result(const std::string& url, bool ok);
  bool request_result(const std::string& url, RequestOutcome outcome);
  // When the node last changed state (ns on the clock), for tests and the admin API.
  int64_t changed_at_ns(const std::string& url) const;

 private:
  struct Entry {
    bool healthy = true;
    bool probing = false;
    int64_t next_probe_ns = 0;
    int probe_failures = 0;    // consecutive
    int probe_successes = 0;   // consecutive
    int request_failures = 0;  // consecutive
    int64_t changed_ns = 0;
  };
  bool set_healthy(Entry& e, bool healthy);

  const Clock& clock_;
  HealthOptions options_;
  std::map<std::string, Entry> nodes_;
};

}  // namespace tessera::router
