// Registration against a store that answers as an etcd cluster does during a leader election: every member
// says "no leader" for a while. A node starting then must wait for the election (the multi-host suite joins
// a node right after isolating a member), while any other failure still fails the start at once.
#include <gtest/gtest.h>

#include <atomic>

#include "ctrl/registry.h"

namespace tessera::ctrl {
namespace {

// Grants fail with `error` `failures` times, then succeed; everything else succeeds.
class ScriptedStore : public Store {
 public:
  ScriptedStore(int failures, std::string error) : failures_(failures), error_(std::move(error)) {}
  Result<LeaseId> grant_lease(std::chrono::milliseconds) override {
    if (grants_.fetch_add(1) < failures_) return unavailable(error_);
    return LeaseId{42};
  }
  Status keep_alive(LeaseId) override { return ok_status(); }
  Status revoke(LeaseId) override { return ok_status(); }
  Status put(const std::string&, const std::string&, LeaseId) override {
    puts_.fetch_add(1);
    return ok_status();
  }
  Status remove(const std::string&) override { return ok_status(); }
  Result<std::vector<KeyValue>> range(const std::string&) override { return std::vector<KeyValue>{}; }
  Result<std::unique_ptr<Watch>> watch(const std::string&, WatchCallback) override {
    return unimplemented("no watches here");
  }
  int grants() const { return grants_.load(); }
  int puts() const { return puts_.load(); }

 private:
  const int failures_;
  const std::string error_;
  std::atomic<int> grants_{0}, puts_{0};
};

constexpr char kNoLeader[] =
    "none of the 3 etcd endpoints answered /v3/lease/grant; last: etcd http://10.0.0.3:2379 /v3/lease/grant "
    "failed (HTTP 503): etcdserver: no leader";

TEST(Registration, StartingDuringAnEtcdElectionWaitsForTheLeader) {
  ScriptedStore store(4, kNoLeader);
  auto reg = Registration::create(store, "/tessera/nodes/n1", R"({"id":"n1"})", std::chrono::milliseconds(5000));
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(store.grants(), 5);
  EXPECT_EQ(store.puts(), 1);
}

TEST(Registration, AnUnreachableControlPlaneStillFailsTheStartAtOnce) {
  ScriptedStore store(1000, "none of the 1 etcd endpoints answered /v3/lease/grant; last: connection refused");
  auto reg = Registration::create(store, "/tessera/nodes/n1", R"({"id":"n1"})", std::chrono::milliseconds(5000));
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reg.status().message().find("connection refused"), std::string::npos) << reg.status().message();
  EXPECT_EQ(store.grants(), 1);
}

}  // namespace
}  // namespace tessera::ctrl
