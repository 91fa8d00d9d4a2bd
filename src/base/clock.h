// Clocks. Deterministic cores take a Clock& so tests can drive time by hand; the edge uses SteadyClock.
#pragma once

#include <chrono>
#include <cstdint>

namespace tessera {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t now_ns() const = 0;
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static const SteadyClock& instance() {
    static const SteadyClock clock;
    return clock;
  }
};

// A clock that moves only when told to. Not thread-safe.
class ManualClock final : public Clock {
 public:
  int64_t now_ns() const override { return now_ns_; }
  void advance_ns(int64_t d) { now_ns_ += d; }

 private:
  int64_t now_ns_ = 0;
};

}  // namespace tessera
