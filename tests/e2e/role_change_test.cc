// Live role change with real processes (issue 18): `tessera ctrl`, three `tessera serve --role-switchable`
// nodes (one prefill, two decode, every prompt prefilled remotely) and `tessera route --ctrl`. While
// `tessera fault-load` streams greedy completions through the router, nodes are re-roled four times by
// POST /admin/role (a decode node holding streams becomes a prefill node, a prefill node becomes a decode
// node, and back): every request succeeds and every token matches a run without role changes (the fault
// suite's token accounting: none lost, none repeated). The router follows the new role through the control
// plane; the route refuses a caller without the cluster credential, bad bodies and non-switchable nodes. And
// the accounting details a request that differs from the reference (its nodes, times, first differing token).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;

using Proc = testing::TesseraServer;
Proc start(std::vector<std::string> args) { return testing::start_tessera(std::move(args)); }

http::Response call(const std::string& method, const std::string& url, const std::string& body,
                    const std::string& token) {
  http::ClientRequest r;
  r.method = method;
  r.url = url;
  r.body = body;
  r.timeout_ms = 5000;
  if (!token.empty()) r.headers[std::string(kClusterTokenHeader)] = token;
  auto res = http::fetch(r);
  EXPECT_TRUE(res.ok()) << url << ": " << res.status().message();
  return res.ok() ? *res : http::Response{};
}

// The router's role for `node`, "" when it does not list it.
std::string router_role(const std::string& router, const std::string& node, const std::string& token) {
  http::Response r = call("GET", router + "/admin/nodes", "", token);
  json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j["nodes"].is_array()) return "";
  for (const json& n : j["nodes"])
    if (n.value("url", "") == node) return n.value("role", "");
  return "";
}

bool wait_router_role(const std::string& router, const std::string& node, const std::string& role,
                      const std::string& token) {
  const auto until = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < until) {
    if (router_role(router, node, token) == role) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST(RoleChange, NodesSwitchRolesUnderLoadWithNoTokenLostOrRepeated) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir();
  const std::string token_file = dir + "/cluster-token";
  auto token = ClusterToken::create(token_file);
  ASSERT_TRUE(token.ok()) << token.status().message();
  const std::string secret = token->secret();
  Proc ctrl = start({"ctrl", "--port", "0", "--cluster-token-file", token_file});
  ASSERT_FALSE(ctrl.url.empty());
  auto node = [&](const std::string& role) {
    return start({"serve", "--model", testing::stories260k_dir(), "--port", "0", "--role", role, "--role-switchable",
                  "--pd-min-tokens", "1", "--ctrl", ctrl.url, "--ctrl-ttl-ms", "1500", "--cluster-token-file",
                  token_file});
  };
  Proc a = node("prefill"), b = node("decode"), c = node("decode");
  ASSERT_FALSE(a.url.empty() || b.url.empty() || c.url.empty());
  Proc router = start(
      {"route", "--port", "0", "--ctrl", ctrl.url, "--probe-interval-ms", "200", "--cluster-token-file", token_file});
  ASSERT_FALSE(router.url.empty());
  ASSERT_TRUE(wait_router_role(router.url, a.url, "prefill", secret));
  ASSERT_TRUE(wait_router_role(router.url, b.url, "decode", secret));
  ASSERT_TRUE(wait_router_role(router.url, c.url, "decode", secret));

  // The route is the cluster's: no credential, no change.
  EXPECT_EQ(call("POST", b.url + "/admin/role", R"({"role":"prefill"})", "").status, 401);
  EXPECT_EQ(call("GET", b.url + "/admin/role", "", "").status, 401);
  EXPECT_EQ(call("POST", b.url + "/admin/role", R"({"role":"sideways"})", secret).status, 400);
  EXPECT_EQ(call("POST", b.url + "/admin/role", R"([1])", secret).status, 400);
  EXPECT_EQ(json::parse(call("GET", b.url + "/admin/role", "", secret).body)["role"], "decode");

  // A fault-free reference run, then the same requests while the roles flip.
  const std::string ref = dir + "/ref.jsonl";
  auto load = [&](std::vector<std::string> extra) {
    // With the cluster token: the router names each request's nodes to credential holders only.
    std::vector<std::string> args = {tessera_bin(),
                                     "fault-load",
                                     "--url",
                                     router.url,
                                     "--clients",
                                     "4",
                                     "--requests",
                                     "60",
                                     "--max-tokens",
                                     "64",
                                     "--cluster-token-file",
                                     token_file};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_process(args, 240);
  };
  auto clean = load({"--write-reference", ref});
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  const std::string flips_log = dir + "/flips.jsonl";
  std::ofstream(dir + "/flip.sh") << "set -e\nflip() { curl -sS -X POST -H 'x-tessera-cluster-token: " << secret
                                  << "' -d \"{\\\"role\\\":\\\"$2\\\"}\" \"$1/admin/role\" >> " << flips_log
                                  << "; echo >> " << flips_log << "; sleep 0.1; }\n"
                                  << "flip " << b.url << " prefill\nflip " << a.url << " decode\nflip " << b.url
                                  << " decode\nflip " << a.url << " prefill\n";
  auto flipped = load({"--reference", ref, "--fault-after", "6", "--fault-cmd", "bash " + dir + "/flip.sh"});
  ASSERT_EQ(flipped.exit_code, 0) << flipped.err;
  json s = json::parse(flipped.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << flipped.out;
  std::fprintf(stderr, "load while roles flip: %s\n", flipped.out.c_str());
  EXPECT_EQ(s["sent"], 240);
  EXPECT_EQ(s["completed"], 240) << flipped.out;
  EXPECT_EQ(s["failed"], 0) << flipped.out;
  EXPECT_EQ(s["lost_tokens"], 0) << flipped.out;
  EXPECT_EQ(s["duplicated_tokens"], 0) << flipped.out;
  EXPECT_EQ(s["mismatched_requests"], 0) << flipped.out;
  EXPECT_EQ(s["text_mismatches"], 0) << flipped.out;
  // The four flips (about 0.5 s) happened while the load ran.
  EXPECT_GT(s["wall_s"].get<double>(), s["fault_at_s"].get<double>() + 0.8) << flipped.out;

  // Every flip changed the role, and at least one happened while the node held streams.
  std::ifstream in(flips_log);
  std::string line;
  int flips = 0, busy = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json f = json::parse(line, nullptr, false);
    ASSERT_TRUE(f.is_object()) << line;
    EXPECT_TRUE(f["changed"].get<bool>()) << line;
    EXPECT_TRUE(f["registered"].get<bool>()) << line;
    ++flips;
    busy += f["in_flight"].get<int>() > 0;
  }
  EXPECT_EQ(flips, 4);
  EXPECT_GT(busy, 0) << "no role change happened while its node held a request; the load is too short";

  // The accounting names a request that differs: its path (the node that answered, its prefill node) and the
  // first token that differs. A reference with request 5's token 10 changed stands in for a divergence.
  std::ifstream ref_in(ref);
  std::ofstream tampered(dir + "/tampered.jsonl");
  for (std::string row; std::getline(ref_in, row);) {
    json j = json::parse(row);
    if (j["i"] == 5) j["tokens"][10] = "999999";
    tampered << j.dump() << "\n";
  }
  tampered.close();
  auto diff = load({"--reference", dir + "/tampered.jsonl"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  json d = json::parse(diff.out, nullptr, false);
  ASSERT_TRUE(d.is_object()) << diff.out;
  EXPECT_EQ(d["mismatched_requests"], 1) << diff.out;
  ASSERT_EQ(d["differing"].size(), 1u) << diff.out;
  const json& x = d["differing"][0];
  EXPECT_EQ(x["i"], 5);
  EXPECT_EQ(x["first_difference_at"], 10);
  EXPECT_TRUE(x["node"] == b.url || x["node"] == c.url) << x.dump();  // the decode nodes, roles flipped back
  EXPECT_EQ(x["prefill_node"], a.url) << x.dump();
  EXPECT_LE(x["start_unix_ms"].get<int64_t>(), x["first_token_unix_ms"].get<int64_t>());
  EXPECT_LE(x["first_token_unix_ms"].get<int64_t>(), x["end_unix_ms"].get<int64_t>());

  // The router follows a change through the control plane (same node, new role), and routes accordingly.
  auto r = call("POST", c.url + "/admin/role", R"({"role":"prefill"})", secret);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(wait_router_role(router.url, c.url, "prefill", secret));
  EXPECT_EQ(json::parse(call("GET", c.url + "/admin/role", "", secret).body)["role"], "prefill");
  // A client request that reaches a node in the prefill role is refused for the router to retry elsewhere.
  auto direct =
      call("POST", c.url + "/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":4})", secret);
  EXPECT_EQ(direct.status, 429) << direct.body;
  EXPECT_NE(direct.body.find("role_changed"), std::string::npos) << direct.body;
  auto through =
      call("POST", router.url + "/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":4})", "");
  EXPECT_EQ(through.status, 200) << through.body;
}

TEST(RoleChange, ANodeStartedWithoutRoleSwitchableRefusesAChange) {
  TS_REQUIRE_STORIES260K();
  Proc n = start({"serve", "--model", testing::stories260k_dir(), "--port", "0"});
  ASSERT_FALSE(n.url.empty());
  auto r = call("POST", n.url + "/admin/role", R"({"role":"prefill"})", "");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("--role-switchable"), std::string::npos) << r.body;
  EXPECT_EQ(call("POST", n.url + "/admin/role", R"({"role":"both"})", "").status, 200);  // already both
}

}  // namespace
}  // namespace tessera
