#include "ctrl/registry.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/log.h"

namespace tessera::ctrl {

using nlohmann::json;

// Bounds for a node's entry: an id, role or address longer than this is not a real node's, and a capacity
// beyond this would dominate every routing decision.
constexpr size_t kMaxNodeFieldBytes = 1024;
constexpr double kMaxNodeCapacity = 1e9;
constexpr size_t kMaxNodeModels = 64;
// How long a registration waits out an etcd election at start. etcd's default election timeout is 1 s; a
// member's isolation or death costs a few of them.
constexpr std::chrono::seconds kElectionWait{10};

namespace {

// What etcd members answer while their cluster elects a leader: "no leader" (a member without one), "leader
// changed" (a proposal dropped by the change), "request timed out" (one that waited on a leader that had gone),
// or no answer in time (a member still forwarding to that leader). Not a control plane that is not there
// (connection refused, an unknown host): that fails a start at once.
bool electing(const Status& s) {
  if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kDeadlineExceeded) return false;
  for (const char* sign : {"no leader", "leader changed", "timed out"}) {
    if (s.message().find(sign) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::string NodeInfo::to_json() const {
  json j = {{"id", id},           {"role", role},         {"backend", backend},
            {"address", address}, {"capacity", capacity}, {"load", load}};
  if (!host_id.empty()) j["host_id"] = host_id;
  if (!models.empty()) j["models"] = models;
  return j.dump();
}

Result<NodeInfo> NodeInfo::from_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("node info is not a JSON object");
  // Written by any process that can reach the store: every field is checked, none may throw.
  JsonFields f(j, "node info");
  NodeInfo n;
  n.id = f.string("id", kMaxNodeFieldBytes);
  n.role = f.string("role", kMaxNodeFieldBytes, "");
  n.backend = f.string("backend", kMaxNodeFieldBytes, "");
  n.address = f.string("address", kMaxNodeFieldBytes, "");
  n.capacity = f.number("capacity", 0, kMaxNodeCapacity, 0.0);
  n.load = f.number("load", 0, kMaxNodeCapacity, 0.0);
  n.host_id = f.string("host_id", kMaxNodeFieldBytes, "");
  if (!f.ok()) return f.status();
  if (j.contains("models")) {
    const json& m = j["models"];
    if (!m.is_array() || m.size() > kMaxNodeModels) return invalid_argument("node info: models must be a short list");
    for (const json& name : m) {
      if (!name.is_string() || name.get<std::string>().empty() || name.get<std::string>().size() > kMaxNodeFieldBytes)
        return invalid_argument("node info: every model name must be a non-empty string");
      n.models.push_back(name.get<std::string>());
    }
  }
  if (n.id.empty()) return invalid_argument("node info has an empty id");
  return n;
}

Result<std::unique_ptr<Registration>> Registration::create(Store& store, std::string key, std::string value,
                                                           std::chrono::milliseconds ttl) {
  if (ttl.count() < 10) return invalid_argument(fmt::format("lease TTL {} ms is too short", ttl.count()));
  std::unique_ptr<Registration> r(new Registration(store, std::move(key), std::move(value), ttl));
  // A node that starts while the etcd cluster elects a leader (the multi-host suite joins one right after
  // isolating a member) waits for the election instead of failing to start; any other error fails at once.
  const auto deadline = std::chrono::steady_clock::now() + kElectionWait;
  Status s = r->register_now();
  while (!s.ok() && electing(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s = r->register_now();
  }
  TS_RETURN_IF_ERROR(s);
  r->thread_ = std::thread([p = r.get()] { p->heartbeat_loop(); });
  return r;
}

Registration::~Registration() {
  LeaseId lease{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    lease = lease_;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  (void)store_.revoke(lease);
}

Status Registration::register_now() {
  TS_ASSIGN_OR_RETURN(LeaseId lease, store_.grant_lease(ttl_));
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    value = value_;
  }
  TS_RETURN_IF_ERROR(store_.put(key_, value, lease));
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease_ = lease;
  }
  registrations_.fetch_add(1);
  return ok_status();
}

Status Registration::update(std::string value) {
  LeaseId lease{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    value_ = value;
    lease = lease_;
  }
  return store_.put(key_, value, lease);
}

// The lease is alive, but the entry itself may have been deleted (or overwritten) by another client while
// this process still runs: a live node must not vanish from the cluster for good. Writes it again under the
// same lease when it is missing or is no longer ours.
Status Registration::restore_if_gone(LeaseId lease) {
  auto kvs = store_.range(key_);
  if (!kvs.ok()) return ok_status();  // the store is unreachable: the next keep-alive tells
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    value = value_;
  }
  for (const KeyValue& kv : *kvs) {
    if (kv.key == key_ && kv.lease == lease && kv.value == value) return ok_status();
  }
  log::warn("ctrl: entry {} was deleted or replaced while this process is alive; writing it again", key_);
  Status s = store_.put(key_, value, lease);
  if (s.ok()) restorations_.fetch_add(1);
  return s;
}

void Registration::heartbeat_loop() {
  const auto period = std::max(ttl_ / 3, std::chrono::milliseconds(5));
  const auto retry = std::min(period, std::chrono::milliseconds(200));
  std::unique_lock<std::mutex> lock(mu_);
  bool lost = false;        // the lease is gone: grant a new one as soon as the store answers
  bool unanswered = false;  // the last renewal did not reach the store
  while (!stop_) {
    cv_.wait_for(lock, lost || unanswered ? retry : period);
    if (stop_) break;
    LeaseId lease = lease_;
    lock.unlock();
    Status s = lost ? not_found("re-registering") : store_.keep_alive(lease);
    if (s.ok()) s = restore_if_gone(lease);
    // A store that does not answer (a member died and the cluster is electing a leader, or the host is
    // starved) may still hold the lease, however long it has been: only the store can say that the lease is
    // gone, so renewal goes on under the same lease until it answers. Granting a new lease on a guess would
    // write the entry a second time and leave the old lease to expire on its own.
    unanswered = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
    if (!s.ok() && !unanswered) {
      // Expired or forgotten (store restart), or refused: write the entry again as soon as the store answers.
      Status r = register_now();
      if (!r.ok() && !lost) log::warn("ctrl: cannot re-register {}: {}", key_, r.message());
      lost = !r.ok();
    }
    lock.lock();
  }
}

}  // namespace tessera::ctrl
