#include "ctrl/memory_core.h"

#include <fmt/format.h>

namespace tessera::ctrl {

Result<LeaseId> MemoryCore::grant(int64_t ttl_ms) {
  expire();
  if (ttl_ms < limits_.min_ttl_ms || ttl_ms > limits_.max_ttl_ms) {
    return invalid_argument(fmt::format("lease TTL must be between {} and {} ms, got {} ms", limits_.min_ttl_ms,
                                        limits_.max_ttl_ms, ttl_ms));
  }
  if (leases_.size() >= limits_.max_leases) {
    return resource_exhausted(fmt::format("the store holds its maximum of {} leases", limits_.max_leases));
  }
  int64_t id = next_lease_++;
  Lease l;
  l.ttl_ns = ttl_ms * 1000000;
  l.deadline_ns = clock_.now_ns() + l.ttl_ns;
  leases_.emplace(id, std::move(l));
  return LeaseId{id};
}

Status MemoryCore::keep_alive(LeaseId lease) {
  expire();
  auto it = leases_.find(static_cast<int64_t>(lease));
  if (it == leases_.end())
    return not_found(fmt::format("lease {} has expired or never existed", static_cast<int64_t>(lease)));
  it->second.deadline_ns = clock_.now_ns() + it->second.ttl_ns;
  return ok_status();
}

Status MemoryCore::revoke(LeaseId lease) {
  expire();
  auto it = leases_.find(static_cast<int64_t>(lease));
  if (it == leases_.end())
    return not_found(fmt::format("lease {} has expired or never existed", static_cast<int64_t>(lease)));
  drop_lease(it);
  return ok_status();
}

Result<int64_t> MemoryCore::put(const std::string& key, const std::string& value, LeaseId lease, PutOptions options) {
  expire();
  if (key.empty()) return invalid_argument("empty key");
  if (key.size() > limits_.max_key_bytes) {
    return invalid_argument(
        fmt::format("a {}-byte key is longer than the {} allowed", key.size(), limits_.max_key_bytes));
  }
  if (value.size() > limits_.max_value_bytes) {
    return invalid_argument(
        fmt::format("a {}-byte value is larger than the {} allowed", value.size(), limits_.max_value_bytes));
  }
  if (lease == LeaseId::kNone && !options.privileged) {
    return permission_denied(fmt::format(
        "'{}': an entry without a lease never expires; only a caller with the cluster credential may write one", key));
  }
  auto lease_it = leases_.find(static_cast<int64_t>(lease));
  if (lease != LeaseId::kNone && lease_it == leases_.end()) {
    return not_found(fmt::format("lease {} has expired or never existed", static_cast<int64_t>(lease)));
  }
  if (lease != LeaseId::kNone && lease_it->second.keys.size() >= limits_.max_keys_per_lease &&
      !lease_it->second.keys.count(key)) {
    return resource_exhausted(fmt::format("lease {} already holds its maximum of {} keys", static_cast<int64_t>(lease),
                                          limits_.max_keys_per_lease));
  }
  auto old = kv_.find(key);
  if (old == kv_.end() && kv_.size() >= limits_.max_keys) {
    return resource_exhausted(fmt::format("the store holds its maximum of {} keys", limits_.max_keys));
  }
  if (old != kv_.end() && old->second.lease != LeaseId::kNone && old->second.lease != lease) {
    auto l = leases_.find(static_cast<int64_t>(old->second.lease));
    if (l != leases_.end()) l->second.keys.erase(key);
  }
  Entry& e = kv_[key];
  e.value = value;
  e.mod_revision = ++revision_;
  e.lease = lease;
  if (lease != LeaseId::kNone) leases_[static_cast<int64_t>(lease)].keys.insert(key);
  record(WatchEvent::Type::kPut, key, e);
  return revision_;
}

Result<int64_t> MemoryCore::remove(const std::string& key) {
  expire();
  if (!kv_.count(key)) return not_found(fmt::format("no key '{}'", key));
  erase_key(key);
  return revision_;
}

std::vector<KeyValue> MemoryCore::range(const std::string& prefix) {
  expire();
  std::vector<KeyValue> out;
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back({it->first, it->second.value, it->second.mod_revision, it->second.lease});
  }
  return out;
}

Result<std::vector<WatchEvent>> MemoryCore::events_since(int64_t since, const std::string& prefix) {
  expire();
  int64_t oldest = revision_ - static_cast<int64_t>(history_.size());  // events after this are kept
  if (since > revision_) {
    return out_of_range(
        fmt::format("revision {} is ahead of this store ({}): it restarted; re-read", since, revision_));
  }
  if (since < oldest) {
    return out_of_range(fmt::format("revision {} was compacted (history starts after {}); re-read", since, oldest));
  }
  std::vector<WatchEvent> out;
  for (size_t i = static_cast<size_t>(since - oldest); i < history_.size(); ++i) {
    const WatchEvent& e = history_[i];
    if (e.kv.key.compare(0, prefix.size(), prefix) == 0) out.push_back(e);
  }
  return out;
}

int MemoryCore::expire() {
  int64_t now = clock_.now_ns();
  int n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (it->second.deadline_ns <= now) {
      drop_lease(it);
      ++n;
    }
    it = next;
  }
  return n;
}

int64_t MemoryCore::next_deadline_ns() const {
  int64_t best = -1;
  for (auto& [id, l] : leases_) {
    if (best < 0 || l.deadline_ns < best) best = l.deadline_ns;
  }
  return best;
}

void MemoryCore::record(WatchEvent::Type type, const std::string& key, const Entry& e) {
  WatchEvent ev;
  ev.type = type;
  ev.kv = {key, type == WatchEvent::Type::kPut ? e.value : std::string(), revision_, e.lease};
  history_.push_back(std::move(ev));
  while (history_.size() > history_limit_) history_.pop_front();
}

void MemoryCore::erase_key(const std::string& key) {
  auto it = kv_.find(key);
  if (it == kv_.end()) return;
  Entry e = std::move(it->second);
  kv_.erase(it);
  if (e.lease != LeaseId::kNone) {
    auto l = leases_.find(static_cast<int64_t>(e.lease));
    if (l != leases_.end()) l->second.keys.erase(key);
  }
  ++revision_;
  record(WatchEvent::Type::kDelete, key, e);
}

void MemoryCore::drop_lease(std::map<int64_t, Lease>::iterator it) {
  std::set<std::string> keys = std::move(it->second.keys);
  leases_.erase(it);
  for (const std::string& k : keys) {
    auto e = kv_.find(k);
    if (e != kv_.end()) {
      e->second.lease = LeaseId::kNone;  // so erase_key does not look the dropped lease up
      erase_key(k);
    }
  }
}

}  // namespace tessera::ctrl
