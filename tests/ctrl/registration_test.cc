// Registration against a store that answers as an etcd cluster does during a leader election: members say "no
// leader", "leader changed" or "request timed out", or do not answer in time, for a while. A node starting then
// must wait for the election (the multi-host suite joins a node right after isolating a member), while a control
// plane that is not there (connection refused, an unknown host) still fails the start at once.
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

// What EtcdClient::call answers when no member did: every member's answer, in the order asked.
constexpr char kNoLeader[] =
    "none of the 3 etcd endpoints answered /v3/lease/grant: etcd http://10.0.0.2:2379 /v3/lease/grant failed (HTTP "
    "503): etcdserver: no leader; etcd http://10.0.0.1:2379 /v3/lease/grant failed (HTTP 503): etcdserver: no "
    "leader; etcd http://10.0.0.3:2379 /v3/lease/grant failed (HTTP 503): etcdserver: no leader";

TEST(Registration, StartingDuringAnEtcdElectionWaitsForTheLeader) {
  ScriptedStore store(4, kNoLeader);
  auto reg = Registration::create(store, "/tessera/nodes/n1", R"({"id":"n1"})", std::chrono::milliseconds(5000));
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(store.grants(), 5);
  EXPECT_EQ(store.puts(), 1);
}

// Right after a leader is cut off, the members that still follow it forward to it and time out, a proposal the
// change dropped says "leader changed", and only the cut-off member says "no leader" (asked first, as a node on
// its host does): all of it is an election, waited out.
TEST(Registration, EveryAnswerOfAnElectionIsWaitedOut) {
  for (const char* answers : {
           "none of the 3 etcd endpoints answered /v3/lease/grant: etcd http://10.0.0.2:2379 /v3/lease/grant failed "
           "(HTTP 503): etcdserver: no leader; etcd http://10.0.0.1:2379: request to 10.0.0.1:2379 timed out; etcd "
           "http://10.0.0.3:2379: request to 10.0.0.3:2379 timed out",
           "none of the 2 etcd endpoints answered /v3/lease/grant: etcd http://10.0.0.1:2379 /v3/lease/grant failed "
           "(HTTP 503): etcdserver: leader changed; etcd http://10.0.0.3:2379 /v3/lease/grant failed (HTTP 503): "
           "etcdserver: request timed out",
       }) {
    ScriptedStore store(3, answers);
    auto reg = Registration::create(store, "/tessera/nodes/n1", R"({"id":"n1"})", std::chrono::milliseconds(5000));
    ASSERT_TRUE(reg.ok()) << answers << ": " << reg.status().to_string();
    EXPECT_EQ(store.grants(), 4) << answers;
    EXPECT_EQ(store.puts(), 1);
  }
}

TEST(Registration, AnUnreachableControlPlaneStillFailsTheStartAtOnce) {
  for (const char* answers :
       {"etcd http://127.0.0.1:1: connection refused",
        "none of the 2 etcd endpoints answered /v3/lease/grant: etcd http://127.0.0.1:1: connection refused; etcd "
        "http://etcd.invalid:2379: could not resolve etcd.invalid"}) {
    ScriptedStore store(1000, answers);
    auto reg = Registration::create(store, "/tessera/nodes/n1", R"({"id":"n1"})", std::chrono::milliseconds(5000));
    ASSERT_FALSE(reg.ok());
    EXPECT_EQ(reg.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(reg.status().message().find("connection refused"), std::string::npos) << reg.status().message();
    EXPECT_EQ(store.grants(), 1) << answers;
  }
}

}  // namespace
}  // namespace tessera::ctrl
