#include "engine/kv_events.h"

#include <algorithm>
#include <random>

namespace tessera::engine {

std::string_view kv_event_name(KvEventType t) { return t == KvEventType::kStored ? "stored" : "removed"; }
std::string_view kv_tier_name(KvTier t) {
  return t == KvTier::kDevice ? "device" : t == KvTier::kHost ? "host" : "disk";
}

namespace {
uint64_t new_epoch() {
  std::random_device rd;
  const uint64_t e = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return e == 0 ? 1 : e;  // 0 means "nothing read yet"
}
}  // namespace

KvEventLog::KvEventLog(size_t capacity) : capacity_(std::max<size_t>(1, capacity)), epoch_(new_epoch()) {}

void KvEventLog::publish(KvEventType type, uint64_t hash, KvTier tier) {
  std::lock_guard lock(mu_);
  publish_locked(type, hash, tier, false);
}

void KvEventLog::publish_state(KvEventType type, uint64_t hash, KvTier tier) {
  std::lock_guard lock(mu_);
  publish_locked(type, hash, tier, true);
}

void KvEventLog::publish_locked(KvEventType type, uint64_t hash, KvTier tier, bool state) {
  auto& held = (state ? held_states_ : held_)[static_cast<int>(tier)];
  if (type == KvEventType::kStored) {
    held.insert(hash);
  } else {
    held.erase(hash);
  }
  events_.push_back({next_++, type, hash, tier, state});
  if (events_.size() > capacity_) events_.pop_front();
}

KvEventRead KvEventLog::read(uint64_t epoch, uint64_t after, size_t max_events) const {
  std::lock_guard lock(mu_);
  KvEventRead r;
  r.epoch = epoch_;
  r.states = states_;
  const uint64_t last = next_ - 1;
  const uint64_t oldest = events_.empty() ? next_ : events_.front().seq;
  // Another run, a number from the future, or one whose successors were dropped: start over from the whole set.
  if (epoch != epoch_ || after > last || after + 1 < oldest) {
    r.reset = true;
    r.last = last;
    for (int t = 0; t < kKvTiers; ++t) {
      r.held[t].assign(held_[t].begin(), held_[t].end());
      std::sort(r.held[t].begin(), r.held[t].end());
      r.held_states[t].assign(held_states_[t].begin(), held_states_[t].end());
      std::sort(r.held_states[t].begin(), r.held_states[t].end());
    }
    return r;
  }
  const size_t from = static_cast<size_t>(after + 1 - oldest);
  const size_t n = std::min(max_events, events_.size() - from);
  r.events.assign(events_.begin() + static_cast<std::ptrdiff_t>(from),
                  events_.begin() + static_cast<std::ptrdiff_t>(from + n));
  r.last = n == 0 ? after : r.events.back().seq;
  return r;
}

size_t KvEventLog::held(KvTier tier) const {
  std::lock_guard lock(mu_);
  return held_[static_cast<int>(tier)].size();
}

size_t KvEventLog::held_states(KvTier tier) const {
  std::lock_guard lock(mu_);
  return held_states_[static_cast<int>(tier)].size();
}

}  // namespace tessera::engine
