// LiveStats (live_stats.h): a ring indexed by second; a slot holding an older second is reset when a newer
// one lands in it, so the ring never needs a sweep and memory stays capacity * sizeof(Bucket).
#include "router/live_stats.h"

#include <algorithm>
#include <chrono>

namespace tessera::router {
namespace {

class WallClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock& wall_clock() {
  static const WallClock clock;
  return clock;
}

LiveStats::LiveStats(const Clock& clock, int capacity_seconds)
    : clock_(clock), ring_(static_cast<size_t>(std::max(1, capacity_seconds))) {}

int64_t LiveStats::now_second() const {
  const int64_t ns = clock_.now_ns();
  return ns >= 0 ? ns / 1000000000 : (ns - 999999999) / 1000000000;
}

void LiveStats::record(const RequestSample& sample) {
  const int64_t sec = now_second();
  std::lock_guard lock(mu_);
  Bucket& b = ring_[static_cast<size_t>(((sec % static_cast<int64_t>(ring_.size())) + ring_.size()) % ring_.size())];
  if (b.second != sec) b = Bucket{sec, SecondStats{sec}, 0, 0};
  SecondStats& s = b.s;
  s.requests++;
  if (!sample.ok) s.errors++;
  s.output_tokens += std::max<int64_t>(0, sample.output_tokens);
  if (sample.ttft_s >= 0) {
    b.ttft_sum += sample.ttft_s;
    s.ttft_count++;
    s.ttft_max_s = std::max(s.ttft_max_s, sample.ttft_s);
    s.ttft_mean_s = b.ttft_sum / static_cast<double>(s.ttft_count);
  }
  if (sample.tpot_s >= 0) {
    b.tpot_sum += sample.tpot_s;
    s.tpot_count++;
    s.tpot_max_s = std::max(s.tpot_max_s, sample.tpot_s);
    s.tpot_mean_s = b.tpot_sum / static_cast<double>(s.tpot_count);
  }
}

std::vector<SecondStats> LiveStats::last(int seconds) const {
  const int n = std::clamp(seconds, 0, capacity());
  const int64_t now = now_second();
  std::vector<SecondStats> out;
  out.reserve(static_cast<size_t>(n));
  std::lock_guard lock(mu_);
  const auto size = static_cast<int64_t>(ring_.size());
  for (int64_t sec = now - n; sec < now; ++sec) {
    const Bucket& b = ring_[static_cast<size_t>(((sec % size) + size) % size)];
    out.push_back(b.second == sec ? b.s : SecondStats{sec});
  }
  return out;
}

}  // namespace tessera::router
