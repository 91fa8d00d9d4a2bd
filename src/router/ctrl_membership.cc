#include "router/ctrl_membership.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/core.h>

#include "base/log.h"
#include "ctrl/registry.h"

namespace tessera::router {
namespace {

using SteadyTime = std::chrono::steady_clock;

bool same_spec(const NodeSpec& a, const NodeSpec& b) {
  return a.url == b.url && a.capacity == b.capacity && a.role == b.role && a.backend == b.backend &&
         a.host_id == b.host_id && a.models == b.models;
}

class CtrlMembership final : public MembershipSource {
 public:
  CtrlMembership(std::unique_ptr<ctrl::Store> store, CtrlMembershipOptions options)
      : store_(std::move(store)), options_(options) {}
  ~CtrlMembership() override { stop(); }

  Status start(MembershipListener& listener) override {
    listener_ = &listener;
    open_watch();
    if (!resync()) {
      std::lock_guard lock(mu_);
      need_resync_ = true;
    }
    thread_ = std::thread([this] { loop(); });
    return ok_status();
  }

  void stop() override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    watch_.reset();  // waits for a callback in progress
  }

 private:
  // ---- the store ------------------------------------------------------------------------------------------

  // Creates the watch if there is none yet; true when one exists. Only the loop thread (and start(), before
  // the loop exists) touches watch_.
  bool open_watch() {
    if (watch_) return true;
    auto w = store_->watch(ctrl::kNodesPrefix, [this](const std::vector<ctrl::WatchEvent>& events, const Status& s) {
      if (!s.ok()) {
        // The store went away or history was lost: keep what we have, re-read when it answers.
        std::lock_guard lock(mu_);
        need_resync_ = true;
        cv_.notify_all();
        return;
      }
      apply_events(events);
    });
    if (!w.ok()) return false;
    watch_ = std::move(w).value();
    return true;
  }

  // Reads the whole node list and reconciles; false when the store could not be read.
  bool resync() {
    auto kvs = store_->range(ctrl::kNodesPrefix);
    if (!kvs.ok()) {
      if (!unreachable_logged_) {
        log::warn("router: control plane unreachable ({}); keeping the last known nodes", kvs.status().message());
        unreachable_logged_ = true;
      }
      return false;
    }
    if (unreachable_logged_) log::info("router: control plane reachable again; re-reading its nodes");
    unreachable_logged_ = false;
    std::lock_guard apply(apply_mu_);
    std::map<std::string, NodeSpec> present;
    for (const ctrl::KeyValue& kv : *kvs) {
      if (auto spec = parse(kv.key, kv.value)) present.emplace(kv.key, std::move(*spec));
    }
    const auto now = SteadyTime::now();
    for (auto& [key, spec] : present) {
      missing_since_.erase(key);
      upsert(key, spec);
    }
    std::vector<std::string> gone;
    for (const auto& [key, spec] : known_) {
      if (present.count(key) != 0) continue;
      auto [it, fresh] = missing_since_.emplace(key, now);
      if (now - it->second >= options_.removal_grace) gone.push_back(key);
    }
    for (const std::string& key : gone) erase(key);
    return true;
  }

  // Under apply_mu_ (bad_keys_).
  std::optional<NodeSpec> parse(const std::string& key, const std::string& value) {
    auto spec = node_spec_from_ctrl(value);
    if (spec.ok()) return std::move(spec).value();
    if (spec.status().code() != StatusCode::kNotFound && bad_keys_.insert(key).second) {
      log::warn("router: ignoring control-plane entry {}: {}", key, spec.status().message());
    }
    return std::nullopt;
  }

  void apply_events(const std::vector<ctrl::WatchEvent>& events) {
    std::lock_guard apply(apply_mu_);
    for (const ctrl::WatchEvent& e : events) {
      if (e.type == ctrl::WatchEvent::Type::kDelete) {
        erase(e.kv.key);
      } else if (auto spec = parse(e.kv.key, e.kv.value)) {
        missing_since_.erase(e.kv.key);
        upsert(e.kv.key, *spec);
      }
    }
  }

  // ---- the listener (under apply_mu_) ---------------------------------------------------------------------

  void upsert(const std::string& key, const NodeSpec& spec) {
    auto it = known_.find(key);
    if (it == known_.end()) {
      known_.emplace(key, spec);
      log::info("router: node {} ({}, {}) joined via the control plane", spec.url, spec.role, spec.backend);
      listener_->on_node_added(spec);
      return;
    }
    if (same_spec(it->second, spec)) return;
    if (it->second.url != spec.url) {
      listener_->on_node_removed(it->second.url);
      it->second = spec;
      listener_->on_node_added(spec);
      return;
    }
    it->second = spec;
    listener_->on_node_updated(spec);
  }

  void erase(const std::string& key) {
    missing_since_.erase(key);
    auto it = known_.find(key);
    if (it == known_.end()) return;
    log::info("router: node {} left the control plane", it->second.url);
    listener_->on_node_removed(it->second.url);
    known_.erase(it);
  }

  // ---- the thread -----------------------------------------------------------------------------------------

  void loop() {
    std::unique_lock lock(mu_);
    auto last_read = SteadyTime::now();
    while (!stopped_) {
      const bool resync_due = need_resync_ || SteadyTime::now() - last_read >= options_.reread_interval;
      lock.unlock();
      bool confirm_due = false;
      {
        std::lock_guard apply(apply_mu_);
        for (const auto& [key, since] : missing_since_) {
          if (SteadyTime::now() - since >= options_.removal_grace) confirm_due = true;
        }
      }
      const bool watching = open_watch();
      bool ok = true;
      if (resync_due || confirm_due) ok = resync();
      if (ok && (resync_due || confirm_due)) last_read = SteadyTime::now();
      lock.lock();
      if (ok && watching && resync_due) need_resync_ = false;
      if (!watching) need_resync_ = true;  // re-read once the watch exists again
      cv_.wait_for(lock, options_.retry_interval, [&] { return stopped_; });
    }
  }

  std::unique_ptr<ctrl::Store> store_;
  const CtrlMembershipOptions options_;
  MembershipListener* listener_ = nullptr;
  std::unique_ptr<ctrl::Watch> watch_;  // owned by the loop thread
  std::thread thread_;
  bool unreachable_logged_ = false;  // loop thread (and start())

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;      // GUARDED_BY(mu_)
  bool need_resync_ = false;  // GUARDED_BY(mu_)

  std::mutex apply_mu_;                                          // serialises listener calls
  std::map<std::string, NodeSpec> known_;                        // GUARDED_BY(apply_mu_): by ctrl key
  std::map<std::string, SteadyTime::time_point> missing_since_;  // GUARDED_BY(apply_mu_)
  std::set<std::string> bad_keys_;                               // GUARDED_BY(apply_mu_)
};

}  // namespace

Result<NodeSpec> node_spec_from_ctrl(const std::string& value) {
  TS_ASSIGN_OR_RETURN(ctrl::NodeInfo info, ctrl::NodeInfo::from_json(value));
  if (info.role == "router") return not_found("a router, not a node");
  if (!info.role.empty() && info.role != "both" && info.role != "prefill" && info.role != "decode") {
    return invalid_argument(fmt::format("node {} has unknown role '{}'", info.id, info.role));
  }
  NodeSpec spec;
  auto url = normalize_node_url(info.address);
  if (!url.ok()) return invalid_argument(fmt::format("node {}: {}", info.id, url.status().message()));
  spec.url = *url;
  spec.capacity = info.capacity > 0 ? info.capacity : 0;
  spec.role = info.role.empty() ? "both" : info.role;
  spec.backend = info.backend;
  spec.host_id = info.host_id;
  spec.models = info.models;
  return spec;
}

std::unique_ptr<MembershipSource> make_ctrl_membership(std::unique_ptr<ctrl::Store> store,
                                                       CtrlMembershipOptions options) {
  return std::make_unique<CtrlMembership>(std::move(store), options);
}

}  // namespace tessera::router
