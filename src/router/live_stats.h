// LiveStats: the router's own measurements of finished requests, kept as a bounded ring of per-second
// buckets for the fleet dashboard's live charts (dashboard/dashboard.h). The gateway records one sample per
// finished request: the time to first byte it forwarded (TTFT as the client sees it, prefill included), the
// time per output token after it (TPOT), and the output tokens (SSE data events, or usage.completion_tokens
// for whole answers). Prometheus histograms (metrics.h) keep the same numbers cumulatively; this keeps their
// recent history, per second, so a page can draw it without a Prometheus server.
//
// Pure: the clock is injected, nothing here sleeps or starts a thread. Thread-safe (one mutex; record() is
// a few additions under it).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/clock.h"

namespace tessera::router {

struct RequestSample {
  double ttft_s = -1;  // < 0: unknown (not streamed, or nothing forwarded)
  double tpot_s = -1;  // < 0: unknown (fewer than two output tokens)
  int64_t output_tokens = 0;
  bool ok = true;  // answered 2xx (or the client left after a complete answer)
};

// One second of finished requests. Means over the requests that had the value; 0 when none had it.
struct SecondStats {
  int64_t second = 0;  // the clock's seconds (wall clock in the gateway: Unix seconds)
  int64_t requests = 0;
  int64_t errors = 0;
  int64_t output_tokens = 0;  // finished in this second: the throughput in tokens/s
  double ttft_mean_s = 0, ttft_max_s = 0;
  double tpot_mean_s = 0, tpot_max_s = 0;
  int64_t ttft_count = 0, tpot_count = 0;
};

class LiveStats {
 public:
  // Keeps the last `capacity_seconds` seconds (at least 1).
  LiveStats(const Clock& clock, int capacity_seconds = 600);

  void record(const RequestSample& sample);
  // The `seconds` (at most the capacity) complete seconds before the current one, oldest first, with
  // empty seconds filled in as zeros: a chart of them has a point per second, idle seconds included.
  std::vector<SecondStats> last(int seconds) const;
  int64_t now_second() const;
  int capacity() const { return static_cast<int>(ring_.size()); }

 private:
  struct Bucket {
    int64_t second = -1;  // which second this slot holds; -1: never used
    SecondStats s;
    double ttft_sum = 0, tpot_sum = 0;
  };
  const Clock& clock_;
  mutable std::mutex mu_;
  std::vector<Bucket> ring_;  // GUARDED_BY(mu_): slot = second % size
};

// The wall clock (CLOCK_REALTIME) as a Clock: the gateway's LiveStats counts Unix seconds, which is what a
// browser's chart axis shows.
const Clock& wall_clock();

}  // namespace tessera::router
