// CtrlMembership against real stores (the embedded server in-process, and a real etcd process): the nodes
// registered under /tessera/nodes/ reach the listener at start, registrations, updates, deregistrations
// and lease expiries are pushed, and an outage of the store neither empties the router nor goes unnoticed:
// after the store comes back (empty) the nodes that re-register stay, new ones are added, and the ones that
// died meanwhile are removed after the grace period.
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "ctrl/registry.h"
#include "ctrl/store_fixture.h"
#include "router/ctrl_membership.h"

namespace tessera::router {
namespace {

using namespace std::chrono_literals;
using ctrl::testing::StoreUnderTest;

class RecordingListener final : public MembershipListener {
 public:
  void on_node_added(const NodeSpec& node) override {
    std::lock_guard lock(mu_);
    nodes_[node.url] = node;
    adds_++;
    cv_.notify_all();
  }
  void on_node_removed(const std::string& url) override {
    std::lock_guard lock(mu_);
    nodes_.erase(url);
    removes_++;
    cv_.notify_all();
  }
  void on_node_updated(const NodeSpec& node) override {
    std::lock_guard lock(mu_);
    nodes_[node.url] = node;
    updates_++;
    cv_.notify_all();
  }
  // Waits until `pred(nodes)` holds; false after `timeout`.
  bool wait(const std::function<bool(const std::map<std::string, NodeSpec>&)>& pred,
            std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(nodes_); });
  }
  std::map<std::string, NodeSpec> nodes() {
    std::lock_guard lock(mu_);
    return nodes_;
  }
  int removes() {
    std::lock_guard lock(mu_);
    return removes_;
  }
  int updates() {
    std::lock_guard lock(mu_);
    return updates_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, NodeSpec> nodes_;
  int adds_ = 0, removes_ = 0, updates_ = 0;
};

std::string node_json(const std::string& id, const std::string& role, int port, double capacity = 8,
                      const std::string& host = "h1") {
  ctrl::NodeInfo n;
  n.id = id;
  n.role = role;
  n.backend = "cpu";
  n.address = "http://127.0.0.1:" + std::to_string(port);
  n.capacity = capacity;
  n.host_id = host;
  return n.to_json();
}

std::string url(int port) { return "http://127.0.0.1:" + std::to_string(port); }

auto has(const std::string& u) {
  return [u](const std::map<std::string, NodeSpec>& n) { return n.count(u) != 0; };
}
auto lacks(const std::string& u) {
  return [u](const std::map<std::string, NodeSpec>& n) { return n.count(u) == 0; };
}

class CtrlMembershipTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    store_ = std::make_unique<StoreUnderTest>(GetParam());
    Status s = store_->start();
    ASSERT_TRUE(s.ok()) << s.to_string();
    client_ = store_->client();
  }
  void TearDown() override {
    if (source_) source_->stop();
    regs_.clear();
    client_.reset();
    store_->stop();
  }
  // etcd's leases are whole seconds, at least 2 s; its store refuses TTLs under 3 s (etcd_store.cc).
  std::chrono::milliseconds ttl(std::chrono::milliseconds embedded) const {
    return GetParam() == "etcd" ? std::max(embedded, std::chrono::milliseconds(3000)) : embedded;
  }
  void register_node(const std::string& id, const std::string& value, std::chrono::milliseconds t = 1500ms) {
    auto r = ctrl::Registration::create(*client_, ctrl::kNodesPrefix + id, value, ttl(t));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    regs_[id] = std::move(r).value();
  }
  void start_source(CtrlMembershipOptions o = {}) {
    source_ = make_ctrl_membership(store_->client(), o);
    ASSERT_TRUE(source_->start(listener_).ok());
  }

  std::unique_ptr<StoreUnderTest> store_;
  std::unique_ptr<ctrl::Store> client_;
  std::map<std::string, std::unique_ptr<ctrl::Registration>> regs_;
  RecordingListener listener_;
  std::unique_ptr<MembershipSource> source_;
};

TEST_P(CtrlMembershipTest, AnnouncesRegisteredNodesThenFollowsTheWatch) {
  register_node("d1", node_json("d1", "decode", 9001, 16, "hostA"));
  ASSERT_TRUE(client_->put(ctrl::kNodesPrefix + std::string("r1"), node_json("r1", "router", 9100)).ok());
  ASSERT_TRUE(client_->put(ctrl::kNodesPrefix + std::string("bad"), R"({"id":"bad","address":"ftp://x"})").ok());
  ASSERT_TRUE(client_->put(ctrl::kNodesPrefix + std::string("junk"), "not json").ok());
  start_source();
  // start() returns after the first read: the node is there already, with what the registry says of it.
  auto now = listener_.nodes();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now.at(url(9001)).role, "decode");
  EXPECT_EQ(now.at(url(9001)).host_id, "hostA");
  EXPECT_EQ(now.at(url(9001)).backend, "cpu");
  EXPECT_EQ(now.at(url(9001)).capacity, 16);

  register_node("p1", node_json("p1", "prefill", 9002));
  ASSERT_TRUE(listener_.wait(has(url(9002))));
  EXPECT_EQ(listener_.nodes().at(url(9002)).role, "prefill");

  ASSERT_TRUE(regs_["d1"]->update(node_json("d1", "decode", 9001, 32, "hostA")).ok());
  ASSERT_TRUE(listener_.wait([](const auto& n) { return n.count(url(9001)) && n.at(url(9001)).capacity == 32; }));
  EXPECT_GE(listener_.updates(), 1);

  regs_.erase("p1");  // deregisters (revokes its lease)
  ASSERT_TRUE(listener_.wait(lacks(url(9002))));
  EXPECT_TRUE(listener_.nodes().count(url(9001)));
}

TEST_P(CtrlMembershipTest, ANodeWhoseLeaseExpiresIsRemovedWithinTheTtl) {
  start_source();
  auto lease = client_->grant_lease(ttl(600ms));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(client_->put(ctrl::kNodesPrefix + std::string("n"), node_json("n", "both", 9003), *lease).ok());
  ASSERT_TRUE(listener_.wait(has(url(9003))));
  const auto t0 = std::chrono::steady_clock::now();
  // Nobody renews the lease: the process "died".
  ASSERT_TRUE(listener_.wait(lacks(url(9003)), 10s));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, std::chrono::duration<double>(ttl(600ms)).count() + 0.5) << "within the lease TTL";
}

TEST_P(CtrlMembershipTest, StoreOutageKeepsTheLastMembershipAndResyncsWhenItReturns) {
  register_node("a", node_json("a", "both", 9011), 900ms);
  register_node("dies", node_json("dies", "both", 9012), 900ms);
  CtrlMembershipOptions o;
  o.removal_grace = ttl(900ms) + 600ms;  // live nodes re-register within one TTL
  start_source(o);
  ASSERT_TRUE(listener_.wait([](const auto& n) { return n.size() == 2; }));

  store_->stop();
  // The process behind "dies" goes away while the store is down: it can never re-register.
  regs_.erase("dies");
  std::this_thread::sleep_for(ttl(900ms) + 600ms);
  EXPECT_EQ(listener_.nodes().size(), 2u) << "an unreachable store must not empty the router";
  EXPECT_EQ(listener_.removes(), 0);

  ASSERT_TRUE(store_->restart_empty().ok());  // same address: client_ (and the registrations) reach it again
  // "a" re-registers by itself (its heartbeat notices the forgotten lease); a new node joins.
  register_node("new", node_json("new", "decode", 9013), 900ms);
  ASSERT_TRUE(listener_.wait(has(url(9013)), 15s)) << "no re-sync after the store came back";
  ASSERT_TRUE(listener_.wait(lacks(url(9012)), 15s)) << "the node that died during the outage was never removed";
  EXPECT_TRUE(listener_.nodes().count(url(9011))) << "a live node was dropped after the store restarted";
  EXPECT_EQ(listener_.removes(), 1);
}

// A store whose watches never report anything (as an etcd restarted with fresh revision numbers answers a
// watch from an old revision): membership must still converge through its periodic re-read.
class DeafStore final : public ctrl::Store {
 public:
  explicit DeafStore(std::unique_ptr<ctrl::Store> inner) : inner_(std::move(inner)) {}
  Result<ctrl::LeaseId> grant_lease(std::chrono::milliseconds ttl) override { return inner_->grant_lease(ttl); }
  Status keep_alive(ctrl::LeaseId lease) override { return inner_->keep_alive(lease); }
  Status revoke(ctrl::LeaseId lease) override { return inner_->revoke(lease); }
  Status put(const std::string& key, const std::string& value, ctrl::LeaseId lease) override {
    return inner_->put(key, value, lease);
  }
  Status remove(const std::string& key) override { return inner_->remove(key); }
  Result<std::vector<ctrl::KeyValue>> range(const std::string& prefix) override { return inner_->range(prefix); }
  Result<std::unique_ptr<ctrl::Watch>> watch(const std::string&, ctrl::WatchCallback) override {
    return std::unique_ptr<ctrl::Watch>(new ctrl::Watch());
  }

 private:
  std::unique_ptr<ctrl::Store> inner_;
};

TEST(CtrlMembershipReread, ConvergesWhenTheWatchMissesEvents) {
  StoreUnderTest store("embedded");
  ASSERT_TRUE(store.start().ok());
  auto client = store.client();
  RecordingListener listener;
  CtrlMembershipOptions o;
  o.reread_interval = 200ms;
  o.removal_grace = 300ms;
  auto source = make_ctrl_membership(std::make_unique<DeafStore>(store.client()), o);
  ASSERT_TRUE(source->start(listener).ok());
  ASSERT_TRUE(client->put(ctrl::kNodesPrefix + std::string("n"), node_json("n", "both", 9021)).ok());
  EXPECT_TRUE(listener.wait(has(url(9021)), 5s)) << "a node the watch never reported was not found by re-reading";
  ASSERT_TRUE(client->remove(ctrl::kNodesPrefix + std::string("n")).ok());
  EXPECT_TRUE(listener.wait(lacks(url(9021)), 5s));
  source->stop();
  store.stop();
}

TEST(CtrlNodeSpec, RejectsEntriesTheRouterCannotUse) {
  EXPECT_EQ(node_spec_from_ctrl(node_json("r", "router", 1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(node_spec_from_ctrl(R"({"id":"x","address":"http://h:1/path"})").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(node_spec_from_ctrl(R"({"id":"x","role":"oracle","address":"http://h:1"})").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(node_spec_from_ctrl("[]").status().code(), StatusCode::kInvalidArgument);
  auto spec = node_spec_from_ctrl(R"({"id":"x","address":"http://h:1"})");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->role, "both");
  EXPECT_EQ(spec->url, "http://h:1");
}

INSTANTIATE_TEST_SUITE_P(Stores, CtrlMembershipTest, ::testing::Values("embedded", "etcd"));

}  // namespace
}  // namespace tessera::router
