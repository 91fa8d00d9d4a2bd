// Discovery through the control plane with real processes: `tessera ctrl` (or a real etcd, or the store
// hosted inside the router), `tessera serve --ctrl` nodes registering with a lease, and `tessera route
// --ctrl` following them. A node that joins is routed to, one that is killed leaves when its lease
// expires, one that shuts down leaves at once; a restarted router rediscovers the nodes; with the control
// plane down the router keeps serving its last known nodes and re-syncs when the control plane returns.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "ctrl/store_fixture.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;
using Time = std::chrono::steady_clock;

std::string local(int port) { return "http://127.0.0.1:" + std::to_string(port); }

struct Proc {
  std::unique_ptr<BackgroundProcess> p;
  std::string url;
};

Proc start(std::vector<std::string> args, const std::string& ready = "listening on") {
  args.insert(args.begin(), tessera_bin());
  Proc out;
  out.p = std::make_unique<BackgroundProcess>(args);
  const int port = testing::port_from_line(out.p->wait_for_line(ready));
  out.url = port > 0 ? local(port) : "";
  return out;
}

// etcd's leases are whole seconds and at least 2 s; its store refuses TTLs under 3 s (etcd_store.cc).
Proc start_node(const std::string& ctrl, std::vector<std::string> extra = {}) {
  const std::string ttl = ctrl.rfind("etcd=", 0) == 0 ? "3000" : "1500";
  std::vector<std::string> args = {
      "serve", "--model", testing::stories260k_dir(), "--port", "0", "--ctrl", ctrl, "--ctrl-ttl-ms", ttl};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(args);
}

Proc start_router(const std::vector<std::string>& discovery) {
  std::vector<std::string> args = {"route", "--port", "0", "--probe-interval-ms", "200"};
  args.insert(args.end(), discovery.begin(), discovery.end());
  return start(args);
}

// URL -> the router's view of that node.
std::map<std::string, json> router_nodes(const std::string& router) {
  http::ClientRequest r;
  r.url = router + "/admin/nodes";
  r.timeout_ms = 3000;
  auto res = http::fetch(r);
  std::map<std::string, json> out;
  if (!res.ok() || res->status != 200) return out;
  json all = json::parse(res->body, nullptr, false);
  if (!all.is_object() || !all["nodes"].is_array()) return out;
  for (auto& n : all["nodes"]) out[n["url"].get<std::string>()] = n;
  return out;
}

// Seconds until `pred(router's nodes)` held, or -1 after `limit`.
template <typename Pred>
double wait_for(const std::string& router, Pred pred, std::chrono::seconds limit = 15s) {
  const auto t0 = Time::now();
  while (Time::now() - t0 < limit) {
    if (pred(router_nodes(router))) return std::chrono::duration<double>(Time::now() - t0).count();
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

int completions(const std::string& router, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    http::ClientRequest r;
    r.method = "POST";
    r.url = router + "/v1/completions";
    r.timeout_ms = 30000;
    r.headers["content-type"] = "application/json";
    r.body =
        json{{"model", "stories260K"}, {"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 4}}.dump();
    auto res = http::fetch(r);
    ok += res.ok() && res->status == 200 ? 1 : 0;
  }
  return ok;
}

uint64_t served(const std::string& router, const std::string& node) {
  auto nodes = router_nodes(router);
  return nodes.count(node) ? nodes[node]["requests_total"].get<uint64_t>() : 0;
}

TEST(RouterCtrlEndToEnd, DiscoversNodesFollowsLeasesAndSurvivesControlPlaneOutage) {
  TS_REQUIRE_STORIES260K();
  Proc ctrl = start({"ctrl", "--port", "0"});
  ASSERT_FALSE(ctrl.url.empty());
  const std::string ctrl_port = ctrl.url.substr(ctrl.url.rfind(':') + 1);
  // The router first: every node reaches it as a pushed update.
  Proc router = start_router({"--ctrl", ctrl.url});
  ASSERT_FALSE(router.url.empty());
  Proc a = start_node(ctrl.url), b = start_node(ctrl.url);
  ASSERT_FALSE(a.url.empty());
  ASSERT_FALSE(b.url.empty());
  const double joined = wait_for(router.url, [&](auto n) { return n.count(a.url) && n.count(b.url); });
  ASSERT_GE(joined, 0) << "the router never saw both nodes";
  std::printf("both nodes in the router %.2f s after the second started\n", joined);
  EXPECT_EQ(router_nodes(router.url)[a.url]["role"], "both");
  EXPECT_EQ(completions(router.url, 6), 6);
  EXPECT_GT(served(router.url, a.url), 0u);
  EXPECT_GT(served(router.url, b.url), 0u);

  // SIGKILL: nobody deregisters; the lease (1.5 s) expires and the router drops the node.
  const auto killed = Time::now();
  EXPECT_EQ(b.p->stop(SIGKILL), 128 + SIGKILL);
  const double gone = wait_for(router.url, [&](auto n) { return n.count(b.url) == 0; });
  ASSERT_GE(gone, 0) << "the killed node was never removed";
  std::printf("killed node removed %.2f s after SIGKILL (lease TTL 1.5 s)\n",
              std::chrono::duration<double>(Time::now() - killed).count());
  EXPECT_LT(std::chrono::duration<double>(Time::now() - killed).count(), 5.0);

  // A restarted router finds the nodes in the control plane again (before it prints its address).
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
  router = start_router({"--ctrl", ctrl.url});
  ASSERT_FALSE(router.url.empty());
  auto now = router_nodes(router.url);
  EXPECT_EQ(now.size(), 1u);
  EXPECT_TRUE(now.count(a.url));
  EXPECT_EQ(completions(router.url, 3), 3);

  // Control plane down: the router keeps serving on what it knew.
  EXPECT_EQ(ctrl.p->stop(SIGKILL), 128 + SIGKILL);
  std::this_thread::sleep_for(2s);
  EXPECT_TRUE(router_nodes(router.url).count(a.url)) << "the router forgot its nodes when the control plane died";
  EXPECT_EQ(completions(router.url, 3), 3);

  // It comes back (empty) on the same port: node a re-registers, a new node joins, the router sees both.
  for (int i = 0; i < 50; ++i) {  // the old port may linger briefly
    ctrl = start({"ctrl", "--port", ctrl_port});
    if (!ctrl.url.empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(ctrl.url.empty()) << "could not restart the control plane on port " << ctrl_port;
  Proc c = start_node(ctrl.url);
  ASSERT_FALSE(c.url.empty());
  ASSERT_GE(wait_for(router.url, [&](auto n) { return n.count(c.url) != 0; }), 0) << "no re-sync after the restart";
  // Longer than the removal grace (3 s): node a, alive and re-registered, must not be dropped.
  std::this_thread::sleep_for(3500ms);
  EXPECT_TRUE(router_nodes(router.url).count(a.url));
  const uint64_t before = served(router.url, c.url);
  EXPECT_EQ(completions(router.url, 4), 4);
  EXPECT_GT(served(router.url, c.url), before) << "the node that joined after the outage got no requests";

  // A node shutting down deregisters at once (no lease wait).
  EXPECT_EQ(c.p->stop(SIGTERM), 0);
  const double left = wait_for(
      router.url, [&](auto n) { return n.count(c.url) == 0; }, 5s);
  EXPECT_GE(left, 0);
  EXPECT_LT(left, 1.5) << "a clean shutdown should not wait for the lease to expire";
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
}

TEST(RouterCtrlEndToEnd, ControlPlaneHostedInsideTheRouter) {
  TS_REQUIRE_STORIES260K();
  Proc router = start_router({"--ctrl-embedded"});
  ASSERT_FALSE(router.url.empty());
  Proc a = start_node(router.url);  // nodes register with the router's own address
  ASSERT_FALSE(a.url.empty());
  ASSERT_GE(wait_for(router.url, [&](auto n) { return n.count(a.url) != 0; }), 0);
  EXPECT_EQ(completions(router.url, 3), 3);
  EXPECT_EQ(a.p->stop(SIGTERM), 0);
  EXPECT_GE(wait_for(
                router.url, [&](auto n) { return n.empty(); }, 5s),
            0);
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
}

TEST(RouterCtrlEndToEnd, DiscoveryThroughARealEtcd) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir() + "/etcd";
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  auto etcd = ctrl::testing::EtcdProcess::start(dir);
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  const std::string spec = "etcd=" + (*etcd)->url();
  Proc router = start_router({"--ctrl", spec});
  ASSERT_FALSE(router.url.empty());
  Proc a = start_node(spec), b = start_node(spec);
  ASSERT_GE(wait_for(router.url, [&](auto n) { return n.count(a.url) && n.count(b.url); }), 0);
  EXPECT_EQ(completions(router.url, 4), 4);
  const auto killed = Time::now();
  EXPECT_EQ(b.p->stop(SIGKILL), 128 + SIGKILL);
  ASSERT_GE(wait_for(router.url, [&](auto n) { return n.count(b.url) == 0; }), 0);
  const double s = std::chrono::duration<double>(Time::now() - killed).count();
  std::printf("etcd: killed node removed %.2f s after SIGKILL (lease TTL 3 s)\n", s);
  EXPECT_LT(s, 3.5) << "within the TTL, plus the router's watch delivery";
  // A restarted router rediscovers from etcd.
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
  router = start_router({"--ctrl", spec});
  auto now = router_nodes(router.url);
  EXPECT_EQ(now.size(), 1u);
  EXPECT_TRUE(now.count(a.url));
  EXPECT_EQ(completions(router.url, 2), 2);
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
  EXPECT_EQ(a.p->stop(SIGTERM), 0);
}

}  // namespace
}  // namespace tessera
