#include "engine/kv_events.h"

#include <algorithm>
#include <random>

namespace tessera::engine {

std::string_view kv_event_name(KvEventType t) { return t == KvEventType::kStored ? "stored" : "removed"; }

namespace {
uint64_t new_epoch() {
  std::random_device rd;
  const uint64_t e = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return e == 0 ? 1 : e;  // 0 means "nothing read yet"
}
}  // namespace

KvEventLog::KvEventLog(size_t capacity) : capacity_(std::max<size_t>(1, capacity)), epoch_(new_epoch()) {}

void KvEventLog::publish(KvEventType type, uint64_t hash) {
  std::lock_guard lock(mu_);
  if (type == KvEventType::kStored) {
    held_.insert(hash);
  } else {
    held_.erase(hash);
  }
  events_.push_back({next_++, type, hash});
  if (events_.size() > capacity_) events_.pop_front();
}

KvEventRead KvEventLog::read(uint64_t epoch, uint64_t after, size_t max_events) const {
  std::lock_guard lock(mu_);
  KvEventRead r;
  r.epoch = epoch_;
  const uint64_t last = next_ - 1;
  const uint64_t oldest = events_.empty() ? next_ : events_.front().seq;
  // Another run, a number from the future, or one whose successors were dropped: start over from the whole set.
  if (epoch != epoch_ || after > last || after + 1 < oldest) {
    r.reset = true;
    r.last = last;
    r.held.assign(held_.begin(), held_.end());
    std::sort(r.held.begin(), r.held.end());
    return r;
  }
  const size_t from = static_cast<size_t>(after + 1 - oldest);
  const size_t n = std::min(max_events, events_.size() - from);
  r.events.assign(events_.begin() + static_cast<std::ptrdiff_t>(from),
                  events_.begin() + static_cast<std::ptrdiff_t>(from + n));
  r.last = n == 0 ? after : r.events.back().seq;
  return r;
}

size_t KvEventLog::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace tessera::engine
