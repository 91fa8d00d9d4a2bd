// Both stores (embedded over HTTP, and a real etcd) behind ctrl::Store: the same behaviour from each.
// Leases expire within their TTL, watches push changes, a killed process's entry disappears within the
// TTL, and registrations come back by themselves after the store restarts empty.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/process.h"
#include "ctrl/embedded_server.h"
#include "ctrl/registry.h"
#include "http/http.h"
#include "link/agent.h"
#include "store_fixture.h"
#include "support/paths.h"

namespace tessera::ctrl {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// etcd leases are whole seconds (and etcd checks expiry every 500 ms); the embedded store is exact.
milliseconds ttl_for(const std::string& kind) { return kind == "etcd" ? milliseconds(3000) : milliseconds(600); }
// Polling every 10 ms and one HTTP round trip: the entry itself must be gone within the TTL.
milliseconds slack_for(const std::string&) { return milliseconds(50); }

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    store_ = std::make_unique<testing::StoreUnderTest>(GetParam());
    Status s = store_->start();
    ASSERT_TRUE(s.ok()) << s.to_string();
    client_ = store_->client();
  }
  // Polls until `pred` holds; returns how long it took, or -1 ms after `limit`.
  template <typename Pred>
  milliseconds wait_until(Pred pred, milliseconds limit) {
    auto t0 = Clock::now();
    while (Clock::now() - t0 < limit) {
      if (pred()) return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
      std::this_thread::sleep_for(milliseconds(10));
    }
    return milliseconds(-1);
  }
  bool has_key(const std::string& key) {
    auto r = client_->range(key);
    return r.ok() && !r->empty() && (*r)[0].key == key;
  }
  std::unique_ptr<testing::StoreUnderTest> store_;
  std::unique_ptr<Store> client_;
};

TEST_P(StoreTest, PutRangeRemove) {
  ASSERT_TRUE(client_->put("/t/b", "2").ok());
  ASSERT_TRUE(client_->put("/t/a", "1").ok());
  ASSERT_TRUE(client_->put("/u/c", "3").ok());
  auto r = client_->range("/t/");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].key, "/t/a");
  EXPECT_EQ((*r)[1].value, "2");
  EXPECT_GT((*r)[0].mod_revision, (*r)[1].mod_revision);  // /t/a was written after /t/b
  ASSERT_TRUE(client_->remove("/t/a").ok());
  EXPECT_EQ(client_->remove("/t/a").code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->range("/t/")->size(), 1u);
  EXPECT_EQ(client_->keep_alive(LeaseId{987654321}).code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, LeaseKeepsEntryAliveAndExpiryRemovesItWithinTheTtl) {
  const milliseconds ttl = ttl_for(GetParam());
  LeaseId l = *client_->grant_lease(ttl);
  ASSERT_TRUE(client_->put("/n/x", "v", l).ok());
  for (int i = 0; i < 6; ++i) {  // 2 TTLs of renewals
    std::this_thread::sleep_for(ttl / 3);
    ASSERT_TRUE(client_->keep_alive(l).ok()) << i;
  }
  EXPECT_TRUE(has_key("/n/x"));
  auto last_renewal = Clock::now();
  milliseconds gone = wait_until([&] { return !has_key("/n/x"); }, ttl * 4);
  ASSERT_GE(gone.count(), 0) << "entry never expired";
  auto since_renewal = std::chrono::duration_cast<milliseconds>(Clock::now() - last_renewal);
  EXPECT_LE(since_renewal, ttl + slack_for(GetParam()))
      << "expired " << since_renewal.count() << " ms after the last renewal";
  EXPECT_EQ(client_->keep_alive(l).code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, TtlsTheStoreCannotHonourAreRefused) {
  EXPECT_EQ(client_->grant_lease(milliseconds(0)).status().code(), StatusCode::kInvalidArgument);
  if (GetParam() == "etcd") {
    auto short_ttl = client_->grant_lease(milliseconds(2000));  // etcd's minimum lease is 2 s, expiring late
    ASSERT_EQ(short_ttl.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(short_ttl.status().message().find("at least 3000 ms"), std::string::npos) << short_ttl.status().message();
  }
}

TEST_P(StoreTest, WatchPushesPutsDeletesAndExpiries) {
  std::mutex mu;
  std::vector<WatchEvent> seen;
  auto w = client_->watch("/w/", [&](const std::vector<WatchEvent>& events, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : events) seen.push_back(e);
  });
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  LeaseId l = *client_->grant_lease(ttl_for(GetParam()));
  ASSERT_TRUE(client_->put("/w/a", "1").ok());
  ASSERT_TRUE(client_->put("/other", "x").ok());
  ASSERT_TRUE(client_->put("/w/b", "2", l).ok());
  ASSERT_TRUE(client_->remove("/w/a").ok());
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  };
  ASSERT_GE(wait_until([&] { return count() >= 4; }, ttl_for(GetParam()) * 5).count(), 0)
      << "saw " << count() << " events";
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].kv.key, "/w/a");
  EXPECT_EQ(seen[0].kv.value, "1");
  EXPECT_EQ(seen[1].kv.key, "/w/b");
  EXPECT_EQ(seen[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(seen[2].kv.key, "/w/a");
  EXPECT_EQ(seen[3].type, WatchEvent::Type::kDelete);  // the lease expired
  EXPECT_EQ(seen[3].kv.key, "/w/b");
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i].kv.mod_revision, seen[i - 1].kv.mod_revision);
}

TEST_P(StoreTest, KilledProcessEntryDisappearsWithinTheTtl) {
  const milliseconds ttl = ttl_for(GetParam());
  auto peer = tessera::Process::spawn(
      {.argv = {tessera::testing::tessera_bin(), "link", "peer", "--name", "doomed", "--endpoint", "tcp", "--ctrl",
                store_->spec(), "--ttl-ms", std::to_string(ttl.count())},
       .pipe_stdin = true});
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(peer->read_line(20000).ok());
  ASSERT_TRUE(has_key("/tessera/agents/doomed"));
  std::this_thread::sleep_for(ttl);  // it stays while the process renews
  ASSERT_TRUE(has_key("/tessera/agents/doomed"));
  peer->kill_now();
  milliseconds gone = wait_until([&] { return !has_key("/tessera/agents/doomed"); }, ttl * 4);
  ASSERT_GE(gone.count(), 0) << "the dead process's entry never disappeared";
  EXPECT_LE(gone, ttl + slack_for(GetParam())) << "took " << gone.count() << " ms";
  std::printf("[ %s ] dead process's entry gone %lld ms after SIGKILL (TTL %lld ms)\n", GetParam().c_str(),
              static_cast<long long>(gone.count()), static_cast<long long>(ttl.count()));
}

TEST_P(StoreTest, RegistrationsComeBackAfterTheStoreRestartsEmpty) {
  const milliseconds ttl = ttl_for(GetParam());
  NodeInfo node{"node-1", "decode", "cpu", "127.0.0.1:9000", 100, 0.25, "", {"llama", "llama-alias"}};
  auto reg = Registration::create(*client_, std::string(kNodesPrefix) + node.id, node.to_json(), ttl);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  ASSERT_TRUE(has_key("/tessera/nodes/node-1"));
  ASSERT_TRUE(store_->restart_empty().ok());
  auto t0 = Clock::now();
  milliseconds back = wait_until([&] { return has_key("/tessera/nodes/node-1"); }, ttl * 10);
  ASSERT_GE(back.count(), 0) << "the registration did not come back";
  // The counter moves just after the put that made the key visible: give it that moment.
  EXPECT_GE(wait_until([&] { return (*reg)->registrations() >= 2; }, milliseconds(1000)).count(), 0)
      << "the entry came back but not through a re-registration (" << (*reg)->registrations() << ")";
  auto kv = client_->range("/tessera/nodes/node-1");
  auto n = NodeInfo::from_json((*kv)[0].value);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->role, "decode");
  EXPECT_DOUBLE_EQ(n->load, 0.25);
  EXPECT_EQ(n->models, (std::vector<std::string>{"llama", "llama-alias"}));  // routers route by these names
  std::printf("[ %s ] re-registered %lld ms after the store came back\n", GetParam().c_str(),
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count()));
  // Dropping the registration removes the entry at once.
  reg->reset();
  EXPECT_FALSE(has_key("/tessera/nodes/node-1"));
}

TEST_P(StoreTest, AgentsFindEachOtherThroughTheControlPlane) {
  auto d1 = link::make_discovery("ctrl", store_->spec());
  auto d2 = link::make_discovery("ctrl", store_->spec());
  ASSERT_TRUE(d1.ok() && d2.ok());
  auto a = link::Agent::create({.name = "ca", .endpoints = {"tcp"}, .discovery = d1->get()});
  auto b = link::Agent::create({.name = "cb", .endpoints = {"tcp"}, .discovery = d2->get()});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->connect("cb").ok());
  link::RegionId ra = *(*a)->allocate_region(64), rb = *(*b)->allocate_region(64);
  std::memset((*a)->host_bytes(ra)->data(), 7, 64);
  ASSERT_TRUE((*a)->write("cb", {{ra, 0, rb, 0, 64}}).wait().ok());
  EXPECT_EQ((*b)->host_bytes(rb)->data()[63], std::byte{7});
  b->reset();  // shutdown withdraws it
  EXPECT_EQ((*d1)->lookup("cb").status().code(), StatusCode::kNotFound);
}

// A client deleting a live node's entry (issue 20: "delete real nodes, they never re-register"): the
// registration notices on its next heartbeat and writes it again, well within one TTL.
TEST_P(StoreTest, ADeletedLiveEntryIsWrittenAgain) {
  const milliseconds ttl = ttl_for(GetParam());
  auto reg = Registration::create(*client_, "/tessera/nodes/live", R"({"id":"live"})", ttl);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  ASSERT_TRUE(has_key("/tessera/nodes/live"));
  ASSERT_TRUE(client_->remove("/tessera/nodes/live").ok());
  EXPECT_GE(wait_until([&] { return has_key("/tessera/nodes/live"); }, ttl).count(), 0) << "not back within the TTL";
  // Counted just after the write lands, so allow the heartbeat thread a moment.
  EXPECT_GE(wait_until([&] { return (*reg)->restorations() >= 1; }, milliseconds(1000)).count(), 0);
  // Overwritten with another value (a hijack of the key): its own value comes back.
  ASSERT_TRUE(client_->put("/tessera/nodes/live", R"({"id":"evil"})", LeaseId::kNone).ok());
  EXPECT_GE(wait_until(
                [&] {
                  auto r = client_->range("/tessera/nodes/live");
                  return r.ok() && r->size() == 1 && (*r)[0].value == R"({"id":"live"})";
                },
                ttl)
                .count(),
            0);
  EXPECT_EQ((*reg)->registrations(), 1) << "restored under the same lease, not a new one";
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("embedded", "etcd"));

TEST(StoreRegistryTest, UnknownKindsAndBadSpecs) {
  EXPECT_EQ(make_store("zookeeper", "http://x:1").status().code(), StatusCode::kNotFound);
  EXPECT_NE(make_store("zookeeper", "http://x:1").status().message().find("etcd"), std::string::npos);
  EXPECT_EQ(make_store("embedded-no-url").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_store("etcd", "ftp://x").status().code(), StatusCode::kInvalidArgument);
  auto unreachable = make_store("embedded", "http://127.0.0.1:1");
  ASSERT_TRUE(unreachable.ok());
  EXPECT_EQ((*unreachable)->put("/k", "v").code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::ctrl

namespace tessera::ctrl {
namespace {

// The embedded store hosted on a server that another component owns (how the router hosts it).
TEST(EmbeddedServerTest, MountsOnAnExistingHttpServer) {
  http::Server server(http::ServerOptions{});
  server.route("GET", "/health",
               [](const http::Request&, std::shared_ptr<http::ResponseWriter> w) { w->send(200, "ok", "text/plain"); });
  EmbeddedServer store;
  store.mount(server);
  ASSERT_TRUE(server.start().ok());
  auto client = make_store("embedded", fmt::format("http://127.0.0.1:{}", server.port()));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->put("/tessera/nodes/r1", "{}").ok());
  EXPECT_EQ((*client)->range("/tessera/")->size(), 1u);
  http::ClientRequest req;
  req.url = fmt::format("http://127.0.0.1:{}/health", server.port());
  EXPECT_EQ(http::fetch(req)->body, "ok");
  // A malformed request is a 400 with a message, not a crash.
  http::ClientRequest bad;
  bad.method = "POST";
  bad.url = fmt::format("http://127.0.0.1:{}/v1/ctrl/kv/put", server.port());
  bad.body = "{\"key\": 5}";
  auto r = http::fetch(bad);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 400);
  store.stop();
  server.stop(100);
}

// Control-plane hygiene over HTTP (issue 20, item 4): each refusal is a 4xx the client maps to a clear
// Status. The privilege predicate stands in for the cluster-credential check (a header here).
TEST(EmbeddedServerTest, QuotasTtlBoundsAndLeaselessEntriesAreRefusedOverHttp) {
  MemoryLimits limits;
  limits.max_keys_per_lease = 3;
  EmbeddedServer store(SteadyClock::instance(), ClusterToken{}, limits);
  store.set_privileged([](const http::Request& r) { return r.header("x-test-admin") == "yes"; });
  ASSERT_TRUE(store.start("127.0.0.1", 0).ok());
  const std::string url = fmt::format("http://127.0.0.1:{}", store.port());
  auto client = make_store("embedded", url);
  ASSERT_TRUE(client.ok());
  Store& c = **client;
  // TTL of INT64_MAX ms (accepted before), and one of a millisecond.
  auto forever = c.grant_lease(milliseconds(INT64_MAX));
  EXPECT_EQ(forever.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(forever.status().message().find("3600000"), std::string::npos) << forever.status().message();
  EXPECT_EQ(c.grant_lease(milliseconds(1)).status().code(), StatusCode::kInvalidArgument);
  // A lease-less entry from a caller without the credential: 403, PermissionDenied.
  EXPECT_EQ(c.put("/tessera/nodes/fake", "{}").code(), StatusCode::kPermissionDenied);
  http::ClientRequest admin;
  admin.method = "POST";
  admin.url = url + "/v1/ctrl/kv/put";
  admin.headers["x-test-admin"] = "yes";
  admin.body = R"({"key": "/tessera/config", "value": "x", "lease": 0})";
  auto ok = http::fetch(admin);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200) << ok->body;
  // Entries per lease and sizes.
  auto lease = c.grant_lease(milliseconds(2000));
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.put(fmt::format("/l/{}", i), "v", *lease).ok());
  EXPECT_EQ(c.put("/l/3", "v", *lease).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.put(std::string(5000, 'k'), "v", *lease).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.put("/big", std::string((1 << 20) + 1, 'v'), *lease).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.range("/")->size(), 4u);
  store.stop();
}

}  // namespace
}  // namespace tessera::ctrl

namespace tessera::ctrl {
namespace {

ClusterToken token(char c) { return std::move(ClusterToken::from_secret(std::string(40, c))).value(); }

// With a cluster token the store refuses every operation from a caller without it (issue 20: anyone who
// reached the port could read the membership, register a node, or delete real ones).
TEST(EmbeddedServerAuth, OperationsWithoutTheTokenAreRefusedAndChangeNothing) {
  EmbeddedServer store(SteadyClock::instance(), token('t'));
  ASSERT_TRUE(store.start("127.0.0.1", 0).ok());
  const std::string url = fmt::format("http://127.0.0.1:{}", store.port());
  auto member = std::move(make_store("embedded", url, {.cluster_token = token('t')})).value();
  ASSERT_TRUE(member->put("/tessera/nodes/real", "{\"address\":\"http://127.0.0.1:1\"}").ok());

  for (const ClusterToken& t : {ClusterToken(), token('x')}) {
    auto outsider = std::move(make_store("embedded", url, {.cluster_token = t})).value();
    const StatusCode want = t.configured() ? StatusCode::kPermissionDenied : StatusCode::kUnauthenticated;
    EXPECT_EQ(outsider->put("/tessera/nodes/fake", "{}").code(), want);
    EXPECT_EQ(outsider->remove("/tessera/nodes/real").code(), want);
    EXPECT_EQ(outsider->range("/tessera/").status().code(), want);
    EXPECT_EQ(outsider->grant_lease(std::chrono::milliseconds(5000)).status().code(), want);
    EXPECT_EQ(outsider->watch("/tessera/", [](const std::vector<WatchEvent>&, const Status&) {}).status().code(), want);
  }
  // Raw requests too: 401 without the header, 403 with a wrong one.
  for (const char* op : {"kv/put", "kv/delete", "kv/range", "lease/grant", "watch"}) {
    auto r = http::fetch({.method = "POST", .url = url + "/v1/ctrl/" + op, .body = "{}"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 401) << op;
    r = http::fetch({.method = "POST",
                     .url = url + "/v1/ctrl/" + op,
                     .headers = {{std::string(kClusterTokenHeader), std::string(40, 'y')}},
                     .body = "{}"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 403) << op;
  }
  auto kvs = member->range("/tessera/");
  ASSERT_TRUE(kvs.ok());
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ((*kvs)[0].key, "/tessera/nodes/real");
  // /health stays open for supervisors.
  auto health = http::fetch({.url = url + "/health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  store.stop();
}

}  // namespace
}  // namespace tessera::ctrl

namespace tessera::ctrl {
namespace {

// etcd with its user auth enabled: the store authenticates with --etcd-user / --etcd-password-file and
// works; without credentials, or with a wrong password, every call is refused.
TEST(EtcdAuth, UserAuthIsUsedAndRequired) {
  auto etcd = testing::EtcdProcess::start(tessera::testing::scratch_dir() + "/etcd-auth");
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  const std::string url = (*etcd)->url();
  auto call = [&](const std::string& path, const std::string& body, const std::string& auth = "") {
    http::ClientRequest r{.method = "POST", .url = url + path, .body = body};
    if (!auth.empty()) r.headers["Authorization"] = auth;
    auto res = http::fetch(r);
    EXPECT_TRUE(res.ok() && res->status == 200) << path << ": " << (res.ok() ? res->body : res.status().to_string());
  };
  call("/v3/auth/user/add", R"({"name": "root", "password": "rootpw"})");
  call("/v3/auth/user/grant", R"({"user": "root", "role": "root"})");
  call("/v3/auth/enable", "{}");

  auto member = make_store("etcd", url, {.etcd_user = "root", .etcd_password = "rootpw"});
  ASSERT_TRUE(member.ok());
  ASSERT_TRUE((*member)->put("/tessera/nodes/n1", "{}").ok());
  auto kvs = (*member)->range("/tessera/");
  ASSERT_TRUE(kvs.ok()) << kvs.status().to_string();
  EXPECT_EQ(kvs->size(), 1u);

  auto anonymous = std::move(make_store("etcd", url)).value();
  EXPECT_FALSE(anonymous->put("/tessera/nodes/fake", "{}").ok());
  EXPECT_FALSE(anonymous->range("/tessera/").ok());
  auto wrong = std::move(make_store("etcd", url, {.etcd_user = "root", .etcd_password = "guess"})).value();
  EXPECT_EQ(wrong->put("/tessera/nodes/fake", "{}").code(), StatusCode::kUnauthenticated);
  kvs = (*member)->range("/tessera/");
  ASSERT_TRUE(kvs.ok());
  EXPECT_EQ(kvs->size(), 1u);
}

}  // namespace
}  // namespace tessera::ctrl
