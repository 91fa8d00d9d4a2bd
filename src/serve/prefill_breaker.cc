// The breaker's state machine (prefill_breaker.h has the rules).
#include "serve/prefill_breaker.h"

#include <algorithm>

namespace tessera::serve {

bool PrefillBreaker::allow(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = nodes_[url];
  if (e.state == BreakerState::kClosed) return true;
  if (e.state == BreakerState::kHalfOpen && !e.trial) {
    e.trial = true;
    return true;
  }
  ++counters_.skipped;
  return false;
}

void PrefillBreaker::success(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  nodes_[url] = Entry{};
}

void PrefillBreaker::open(Entry& e, int64_t cooldown_ms, bool suspect) {
  if (e.state != BreakerState::kOpen) ++counters_.opened;
  e.state = BreakerState::kOpen;
  e.trial = false;
  e.suspect = suspect;
  e.cooldown_ms = std::clamp<int64_t>(cooldown_ms, 0, options_.max_cooldown_ms);
  // A suspect node is probed at once: only a probe says whether it is slow or gone.
  e.next_probe_ns = clock_.now_ns() + (suspect ? 0 : e.cooldown_ms * 1'000'000);
}

bool PrefillBreaker::timeout(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = nodes_[url];
  if (e.state == BreakerState::kOpen) return false;  // a call sent before it opened
  ++e.timeouts;
  e.errors = 0;
  const bool was_half_open = e.state == BreakerState::kHalfOpen;
  open(e, was_half_open ? std::max(options_.cooldown_ms, e.cooldown_ms * 2) : options_.cooldown_ms, !was_half_open);
  return true;
}

bool PrefillBreaker::error(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = nodes_[url];
  if (e.state == BreakerState::kOpen) return false;
  ++e.errors;
  if (e.state == BreakerState::kHalfOpen) {
    open(e, std::max(options_.cooldown_ms, e.cooldown_ms * 2), false);
    return true;
  }
  if (e.errors < options_.error_threshold) return false;
  open(e, options_.cooldown_ms, false);
  return true;
}

std::vector<std::string> PrefillBreaker::due_probes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> due;
  const int64_t now = clock_.now_ns();
  for (auto& [url, e] : nodes_) {
    if (e.state != BreakerState::kOpen || e.probing || e.next_probe_ns > now) continue;
    e.probing = true;
    due.push_back(url);
  }
  return due;
}

void PrefillBreaker::probe_result(const std::string& url, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(url);
  if (it == nodes_.end() || it->second.state != BreakerState::kOpen) return;
  Entry& e = it->second;
  e.probing = false;
  const bool suspect = e.suspect;
  e.suspect = false;
  if (!ok) {
    // The first failed probe of a suspect node starts the normal cooldown; later ones double it.
    e.cooldown_ms = suspect ? options_.cooldown_ms : std::min(options_.max_cooldown_ms, e.cooldown_ms * 2);
    e.next_probe_ns = clock_.now_ns() + e.cooldown_ms * 1'000'000;
    return;
  }
  if (suspect && e.timeouts < options_.timeout_threshold) {
    e.state = BreakerState::kClosed;  // slow, not hung: keep the timeout count, send it requests again
    return;
  }
  e.state = BreakerState::kHalfOpen;
  e.trial = false;
}

BreakerState PrefillBreaker::state(const std::string& url) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(url);
  return it == nodes_.end() ? BreakerState::kClosed : it->second.state;
}

BreakerCounters PrefillBreaker::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace tessera::serve
