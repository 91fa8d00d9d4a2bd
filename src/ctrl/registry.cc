#include "ctrl/registry.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/log.h"

namespace tessera::ctrl {

using nlohmann::json;

std::string NodeInfo::to_json() const {
  json j = {{"id", id},           {"role", role},         {"backend", backend},
            {"address", address}, {"capacity", capacity}, {"load", load}};
  if (!host_id.empty()) j["host_id"] = host_id;
  return j.dump();
}

Result<NodeInfo> NodeInfo::from_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("node info is not a JSON object");
  NodeInfo n;
  try {
    n.id = j.at("id").get<std::string>();
    n.role = j.value("role", "");
    n.backend = j.value("backend", "");
    n.address = j.value("address", "");
    n.capacity = j.value("capacity", 0.0);
    n.load = j.value("load", 0.0);
    n.host_id = j.value("host_id", "");
  } catch (const json::exception& e) {
    return invalid_argument(fmt::format("node info: {}", e.what()));
  }
  if (n.id.empty()) return invalid_argument("node info has an empty id");
  return n;
}

Result<std::unique_ptr<Registration>> Registration::create(Store& store, std::string key, std::string value,
                                                           std::chrono::milliseconds ttl) {
  if (ttl.count() < 10) return invalid_argument(fmt::format("lease TTL {} ms is too short", ttl.count()));
  std::unique_ptr<Registration> r(new Registration(store, std::move(key), std::move(value), ttl));
  TS_RETURN_IF_ERROR(r->register_now());
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

void Registration::heartbeat_loop() {
  const auto period = std::max(ttl_ / 3, std::chrono::milliseconds(5));
  std::unique_lock<std::mutex> lock(mu_);
  bool lost = false;
  while (!stop_) {
    cv_.wait_for(lock, lost ? std::chrono::milliseconds(std::min<int64_t>(period.count(), 200)) : period);
    if (stop_) break;
    LeaseId lease = lease_;
    lock.unlock();
    Status s = lost ? unavailable("re-registering") : store_.keep_alive(lease);
    if (!s.ok()) {
      // Expired or forgotten (store restart), or the store is unreachable: write the entry again as soon as
      // the store answers.
      Status r = register_now();
      if (!r.ok() && !lost) log::warn("ctrl: cannot re-register {}: {}", key_, r.message());
      lost = !r.ok();
    }
    lock.lock();
  }
}

}  // namespace tessera::ctrl
