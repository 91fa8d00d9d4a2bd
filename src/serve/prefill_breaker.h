// PrefillBreaker: a circuit breaker per prefill node, kept by a decode node (issue 20 item 5).
//
// Without it a hung prefill node (SIGSTOP, a wedged engine, a black-holed host) costs every PD request the
// whole --pd-timeout-ms while it hangs. The rules:
//   closed     requests go to the node. A timeout opens the breaker at once and asks for a probe now (the
//              prefill reply comes whole after the prompt is computed, so a node past the timeout looks the
//              same whether it is slow or hung; the probe tells them apart). `error_threshold` consecutive
//              errors (connection refused, 5xx) open it too.
//   open       requests skip the node (they go to another prefill node or are prefilled locally). Probes
//              (GET /internal/pd/info, run by the owner) are due after `cooldown`; a failed probe doubles
//              the cooldown up to `max_cooldown_ms`.
//   probe ok   after a timeout on a node that still answers (slow, not hung) the breaker closes again unless
//              `timeout_threshold` timeouts came in a row; otherwise it goes half-open.
//   half-open  one real request (the trial) goes to the node: success closes the breaker, failure reopens it
//              with a doubled cooldown.
// Pure logic with an injected clock, like router/health.h: no sockets, no threads, no sleeping.
//
// Thread-safe (one mutex): every request thread and the prober call in.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"

namespace tessera::serve {

struct BreakerOptions {
  int error_threshold = 3;     // consecutive errors that open
  int timeout_threshold = 2;   // consecutive timeouts of a node that still answers probes that open
  int64_t cooldown_ms = 1000;  // open -> first probe
  int64_t max_cooldown_ms = 30000;
};

enum class BreakerState { kClosed, kOpen, kHalfOpen };

struct BreakerCounters {
  uint64_t opened = 0;   // closed/half-open -> open transitions
  uint64_t skipped = 0;  // requests that did not wait on an open node
};

class PrefillBreaker {
 public:
  PrefillBreaker(const Clock& clock, BreakerOptions options) : clock_(clock), options_(options) {}

  // May a request go to `url` now? In half-open only the first caller gets true (the trial).
  bool allow(const std::string& url);
  void success(const std::string& url);
  // Returns true when this call opened the breaker (the caller then abandons other calls waiting on it).
  bool timeout(const std::string& url);
  bool error(const std::string& url);

  // Open nodes whose probe is due; each is marked as probing until probe_result().
  std::vector<std::string> due_probes();
  void probe_result(const std::string& url, bool ok);

  BreakerState state(const std::string& url) const;
  BreakerCounters counters() const;

 private:
  struct Entry {
    BreakerState state = BreakerState::kClosed;
    int errors = 0;        // consecutive
    int timeouts = 0;      // consecutive
    bool suspect = false;  // opened by a timeout, the first probe not back yet
    bool probing = false;
    bool trial = false;  // half-open: the trial request is out
    int64_t cooldown_ms = 0;
    int64_t next_probe_ns = 0;
  };
  void open(Entry& e, int64_t cooldown_ms, bool suspect);

  const Clock& clock_;
  const BreakerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> nodes_;  // GUARDED_BY(mu_)
  BreakerCounters counters_;            // GUARDED_BY(mu_)
};

}  // namespace tessera::serve
