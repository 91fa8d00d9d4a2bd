// What the control plane stores, and how a process keeps its entries alive.
//
// Keys: /tessera/nodes/<id> (NodeInfo as JSON), /tessera/agents/<name> (link::AgentInfo text),
// /tessera/regions/<agent>/<id> (link::RegionDesc text). Every entry is put under its owner's lease.
//
// Registration keeps one entry alive: it renews the lease every TTL/3 on its own thread, and when renewal
// fails with NotFound (the lease expired during a stall, or the store restarted and forgot it) it grants a
// new lease and writes the entry again. While the store does not answer at all (an etcd election, a
// partition) renewal is retried every 200 ms under the same lease, since only the store knows whether it
// still holds it. When renewal succeeds but the entry is gone (another client deleted it, or replaced its
// value), it is written again under the same lease on that heartbeat. So after a store restart every live
// process re-registers within about TTL/3 of the store answering again; a dead process stops renewing and
// its entry disappears within the TTL.
//
// Thread-safety: Registration is thread-safe; NodeInfo is a value.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ctrl/store.h"

namespace tessera::ctrl {

inline constexpr const char* kNodesPrefix = "/tessera/nodes/";
inline constexpr const char* kAgentsPrefix = "/tessera/agents/";
inline constexpr const char* kRegionsPrefix = "/tessera/regions/";

struct NodeInfo {
  std::string id;
  std::string role;                 // "prefill", "decode", "both", "router", ...
  std::string backend;              // "cpu", "cuda", ...
  std::string address;              // where its HTTP face listens
  double capacity = 0;              // tokens/s or slots, by the role's convention
  double load = 0;                  // fraction of capacity in use
  std::string host_id;              // equal for processes on one host (link::local_host_id()); may be empty
  std::vector<std::string> models;  // the model names it serves (the first is the one answers carry); may be empty

  std::string to_json() const;
  static Result<NodeInfo> from_json(const std::string& text);
};

class Registration {
 public:
  // Writes key=value under a fresh lease of `ttl` and starts renewing it. The store must outlive this.
  static Result<std::unique_ptr<Registration>> create(Store& store, std::string key, std::string value,
                                                      std::chrono::milliseconds ttl);
  // Revokes the lease: the entry disappears at once.
  ~Registration();

  // Replaces the value (e.g. a node's load); kept across re-registrations.
  Status update(std::string value);
  // How many times the entry has been written with a new lease (1 after create()).
  int registrations() const { return registrations_.load(); }
  // How many times the entry was found deleted or replaced under a live lease and written again.
  int restorations() const { return restorations_.load(); }

 private:
  Registration(Store& store, std::string key, std::string value, std::chrono::milliseconds ttl)
      : store_(store), key_(std::move(key)), value_(std::move(value)), ttl_(ttl) {}
  Status register_now();
  Status restore_if_gone(LeaseId lease);
  void heartbeat_loop();

  Store& store_;
  const std::string key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string value_;  // guarded by mu_
  LeaseId lease_{};    // guarded by mu_
  bool stop_ = false;  // guarded by mu_
  const std::chrono::milliseconds ttl_;
  std::atomic<int> registrations_{0};
  std::atomic<int> restorations_{0};
  std::thread thread_;
};

}  // namespace tessera::ctrl
