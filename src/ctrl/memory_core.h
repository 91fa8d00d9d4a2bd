// MemoryCore: the deterministic heart of the embedded store. Keys, revisions, leases and a bounded history
// of change events, driven by an injected Clock (values in, values out; no threads, no sockets), so lease
// expiry and watch semantics are tested without sleeping.
//
// Revisions start at 1 and grow by one per change; an expired or revoked lease deletes its keys, each
// deletion an event. events_since() serves watches from the history; a watcher that fell behind the
// history (or whose revision is ahead of this store: the store restarted) gets OutOfRange and must re-read.
//
// Quotas (MemoryLimits): whoever reaches the store may write to it, so the number of keys and leases, the
// size of keys and values, the entries per lease and the lease TTL are bounded; a request beyond them gets
// ResourceExhausted (quotas) or InvalidArgument (sizes, TTL) naming the limit. An entry without a lease
// never expires, so only a privileged caller (PutOptions::privileged: the HTTP layer sets it for a caller
// that presented the cluster credential) may write one; others get PermissionDenied.
//
// Thread-safety: none; the embedded server serialises calls with a mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "ctrl/store.h"

namespace tessera::ctrl {

struct MemoryLimits {
  size_t max_keys = 100000;
  size_t max_leases = 100000;
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = 1 << 20;
  size_t max_keys_per_lease = 1024;
  // Sub-second TTLs are allowed (fast failover; the tests use 600 ms); below 100 ms a registrant would renew
  // faster than the store can be asked. Above an hour a dead process's entries linger too long to matter.
  int64_t min_ttl_ms = 100;
  int64_t max_ttl_ms = 3600 * 1000;
};

struct PutOptions {
  bool privileged = false;  // may write an entry without a lease
};

class MemoryCore {
 public:
  explicit MemoryCore(const Clock& clock, size_t history = 10000, MemoryLimits limits = {})
      : clock_(clock), history_limit_(history), limits_(limits) {}

  Result<LeaseId> grant(int64_t ttl_ms);
  Status keep_alive(LeaseId lease);
  Status revoke(LeaseId lease);
  // Returns the new revision.
  Result<int64_t> put(const std::string& key, const std::string& value, LeaseId lease, PutOptions options = {});
  const MemoryLimits& limits() const { return limits_; }
  Result<int64_t> remove(const std::string& key);
  std::vector<KeyValue> range(const std::string& prefix);
  // Events with revision > since whose key starts with prefix.
  Result<std::vector<WatchEvent>> events_since(int64_t since, const std::string& prefix);
  int64_t revision() const { return revision_; }
  // Deletes the keys of every lease whose deadline has passed; returns how many leases expired.
  int expire();
  // Nanoseconds (on the clock) of the earliest lease deadline, or -1 with no leases.
  int64_t next_deadline_ns() const;

 private:
  struct Lease {
    int64_t ttl_ns = 0;
    int64_t deadline_ns = 0;
    std::set<std::string> keys;
  };
  struct Entry {
    std::string value;
    int64_t mod_revision = 0;
    LeaseId lease = LeaseId::kNone;
  };
  void record(WatchEvent::Type type, const std::string& key, const Entry& e);
  void erase_key(const std::string& key);
  void drop_lease(std::map<int64_t, Lease>::iterator it);

  const Clock& clock_;
  size_t history_limit_;
  const MemoryLimits limits_;
  int64_t revision_ = 0;
  int64_t next_lease_ = 1;
  std::map<std::string, Entry> kv_;
  std::map<int64_t, Lease> leases_;
  std::deque<WatchEvent> history_;  // revisions (revision_ - history_.size(), revision_]
};

}  // namespace tessera::ctrl
