// The joint prefill/decode pair choice with fake nodes: load on each side, host locality (shm beats tcp
// unless the local pair is loaded enough to outweigh the link), capacity, rotation among equals, and the
// /internal/pd/info parser the router learns roles and hosts with.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "api/pd_messages.h"
#include "router/pd_pairing.h"

namespace tessera::router {
namespace {

NodeSnapshot node(std::string url, std::string host, int in_flight = 0, double capacity = 1) {
  NodeSnapshot n;
  n.url = std::move(url);
  n.host_id = std::move(host);
  n.in_flight = in_flight;
  n.capacity = capacity;
  return n;
}

TEST(PdPairing, EmptySidesGiveNoPair) {
  std::vector<NodeSnapshot> none, one = {node("d", "h")};
  EXPECT_FALSE(choose_pd_pair(none, one, {}).has_value());
  EXPECT_FALSE(choose_pd_pair(one, none, {}).has_value());
}

TEST(PdPairing, SameHostPairWinsWhenLoadsAreEqual) {
  std::vector<NodeSnapshot> decodes = {node("d1", "hostA"), node("d2", "hostB")};
  std::vector<NodeSnapshot> prefills = {node("p1", "hostB"), node("p2", "hostC")};
  for (uint64_t rot = 0; rot < 8; ++rot) {
    auto pair = choose_pd_pair(decodes, prefills, {}, rot);
    ASSERT_TRUE(pair.has_value());
    EXPECT_EQ(decodes[pair->decode].url, "d2");
    EXPECT_EQ(prefills[pair->prefill].url, "p1");
    EXPECT_TRUE(pair->same_host);
  }
}

TEST(PdPairing, LoadOutweighsLocalityBeyondTheLinkCost) {
  std::vector<NodeSnapshot> decodes = {node("d", "hostA")};
  // The local prefill node has 1 request in flight: 1 > tcp_link_cost 0.5, so the remote idle one wins.
  std::vector<NodeSnapshot> prefills = {node("local", "hostA", 1), node("remote", "hostB", 0)};
  auto pair = choose_pd_pair(decodes, prefills, {});
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(prefills[pair->prefill].url, "remote");
  EXPECT_FALSE(pair->same_host);
  // With a dearer link the local one is still worth it.
  PairingOptions o;
  o.tcp_link_cost = 2;
  pair = choose_pd_pair(decodes, prefills, o);
  EXPECT_EQ(prefills[pair->prefill].url, "local");
  EXPECT_DOUBLE_EQ(pair->cost, 1.0);
}

TEST(PdPairing, ChoosesBothSidesJointly) {
  // d1 is busy (next to the idle p1); d2 is idle but on no prefill node's host; d3 is idle next to p2, which
  // has a request in flight. (d2, p1) costs 0 + 0 + 0.5 (tcp); (d3, p2) costs 0 + 1 + 0 (shm); (d1, p1) 4.
  std::vector<NodeSnapshot> decodes = {node("d1", "h1", 4), node("d2", "h2", 0), node("d3", "h3", 0)};
  std::vector<NodeSnapshot> prefills = {node("p1", "h1", 0), node("p2", "h3", 1)};
  auto pair = choose_pd_pair(decodes, prefills, {});
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(decodes[pair->decode].url, "d2");
  EXPECT_EQ(prefills[pair->prefill].url, "p1");
  EXPECT_DOUBLE_EQ(pair->cost, 0.5);
  // ...unless the link costs more than p2's extra request.
  PairingOptions o;
  o.tcp_link_cost = 1.5;
  pair = choose_pd_pair(decodes, prefills, o);
  EXPECT_EQ(decodes[pair->decode].url, "d3");
  EXPECT_EQ(prefills[pair->prefill].url, "p2");
  EXPECT_TRUE(pair->same_host);
}

TEST(PdPairing, CapacityScalesLoad) {
  std::vector<NodeSnapshot> decodes = {node("d", "h")};
  // 3 in flight on a node 4x the size is lighter than 1 on a unit node.
  std::vector<NodeSnapshot> prefills = {node("small", "h", 1, 1), node("big", "h", 3, 4)};
  auto pair = choose_pd_pair(decodes, prefills, {});
  EXPECT_EQ(prefills[pair->prefill].url, "big");
}

TEST(PdPairing, UnknownHostsAreTreatedAsRemote) {
  EXPECT_FALSE(same_host(node("a", ""), node("b", "")));
  EXPECT_TRUE(same_host(node("a", "x"), node("b", "x")));
}

TEST(PdPairing, EqualPairsRotate) {
  std::vector<NodeSnapshot> decodes = {node("d", "h")};
  std::vector<NodeSnapshot> prefills = {node("p1", "h"), node("p2", "h"), node("p3", "h")};
  std::map<std::string, int> seen;
  for (uint64_t rot = 0; rot < 30; ++rot) seen[prefills[choose_pd_pair(decodes, prefills, {}, rot)->prefill].url]++;
  EXPECT_EQ(seen.size(), 3u);
  for (auto& [url, count] : seen) EXPECT_EQ(count, 10) << url;
}

TEST(PdPairing, ColocatedNodesCompeteAsPairsOfOne) {
  std::vector<NodeSnapshot> decodes = {node("d", "h")}, prefills = {node("p", "h")}, colocated = {node("c", "h")};
  // All idle: a tie, which goes to the disaggregated pair.
  PdRoute r = choose_pd_route(decodes, prefills, colocated, {});
  ASSERT_TRUE(r.pair.has_value());
  EXPECT_FALSE(r.colocated.has_value());
  // The decode node is busy: the idle colocated node is cheaper.
  decodes[0].in_flight = 2;
  r = choose_pd_route(decodes, prefills, colocated, {});
  EXPECT_FALSE(r.pair.has_value());
  ASSERT_TRUE(r.colocated.has_value());
  // The colocated node carries its load twice (prefill and decode): 1 in flight costs 2, a tie again.
  colocated[0].in_flight = 1;
  r = choose_pd_route(decodes, prefills, colocated, {});
  EXPECT_TRUE(r.pair.has_value());
  // No colocated nodes: the pair; no prefill nodes: the cheapest colocated node.
  EXPECT_TRUE(choose_pd_route(decodes, prefills, {}, {}).pair.has_value());
  std::vector<NodeSnapshot> two = {node("c1", "h", 3), node("c2", "h", 1)};
  r = choose_pd_route(decodes, {}, two, {});
  ASSERT_TRUE(r.colocated.has_value());
  EXPECT_EQ(two[*r.colocated].url, "c2");
}

TEST(PdPairing, ParsesPdInfo) {
  auto info =
      api::parse_pd_info(R"({"role":"prefill","agent":"name=p-1 host=vm/abc shm=/tmp/x tcp=127.0.0.1:5","model":{}})");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->role, "prefill");
  EXPECT_EQ(info->host_id, "vm/abc");
  EXPECT_FALSE(api::parse_pd_info("nope").ok());
  EXPECT_FALSE(api::parse_pd_info(R"({"role":"oracle"})").ok());
  EXPECT_FALSE(api::parse_pd_info(R"({"role":3})").ok());
  auto bare = api::parse_pd_info(R"({"role":"decode"})");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host_id, "");
}

}  // namespace
}  // namespace tessera::router
