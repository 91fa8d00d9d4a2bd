// The dashboard served by a real gateway in-process, in front of scripted nodes (http::Server) and a real
// embedded control plane: the planner's history put in the store shows in /dashboard/api/state (and "absent"
// or "no_ctrl" when there is none), nodes carry role, backend, device, health, load and KV use from their
// /health, link rates come from the decode node's per-prefill counters, streamed requests fill the TTFT /
// TPOT / throughput series, and every dashboard route refuses a caller without the API key (401 asking for
// Basic credentials) while taking the key as Bearer or Basic password, and the cluster token.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "ctrl/embedded_server.h"
#include "ctrl/store.h"
#include "http/http.h"
#include "router/dashboard/assets.h"
#include "router/dashboard/dashboard.h"
#include "router/dashboard/planner_view.h"
#include "router/gateway.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using WriterPtr = std::shared_ptr<http::ResponseWriter>;

// A scripted PD node: /health with backend and device, /internal/pd/info with its role, /metrics whose
// per-prefill KV counter grows by 4096 bytes on every scrape, and streamed completions of three tokens.
class ScriptedNode {
 public:
  ScriptedNode(std::string role, std::string backend, std::string prefill_url = "") : server_(http::ServerOptions{}) {
    server_.route("GET", "/internal/pd/info", [role](const http::Request&, WriterPtr w) {
      w->send(200, json{{"role", role}, {"agent", "name=x host=h1"}}.dump());
    });
    server_.route("GET", "/health", [this, backend](const http::Request&, WriterPtr w) {
      w->send(200, json{{"status", "ok"},
                        {"model", "m"},
                        {"backend", backend},
                        {"device", backend + " device 0"},
                        {"waiting", 1},
                        {"running", 2},
                        {"kv_blocks_used", 16},
                        {"kv_blocks_total", 64}}
                       .dump());
    });
    server_.route("GET", "/metrics", [this, prefill_url](const http::Request&, WriterPtr w) {
      const uint64_t bytes = 4096 * ++scrapes;
      std::string text = "tessera_pd_kv_bytes_total " + std::to_string(prefill_url.empty() ? 0 : bytes) + "\n";
      if (!prefill_url.empty()) {
        text += "tessera_pd_kv_bytes_from_total{prefill=\"" + prefill_url + "\"} " + std::to_string(bytes) + "\n";
      }
      w->send(200, text, "text/plain; version=0.0.4");
    });
    server_.route("POST", "/v1/completions", [](const http::Request&, WriterPtr w) {
      w->start_stream(200);
      for (const char* t : {"a", "b", "c"}) {
        std::this_thread::sleep_for(5ms);
        w->write(std::string("data: {\"choices\":[{\"text\":\"") + t + "\"}]}\n\n");
      }
      w->write("data: [DONE]\n\n");
      w->end();
    });
    EXPECT_TRUE(server_.start().ok());
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::atomic<uint64_t> scrapes{0};

 private:
  http::Server server_;
};

struct Router {
  explicit Router(GatewayOptions go = {}, DashboardOptions dopts = {}) {
    go.health.probe_interval_ms = 50;
    go.health.healthy_threshold = 1;
    gateway = std::move(Gateway::create(std::move(go))).value();
    dopts.sampler.interval_ms = 100;
    dashboard = std::make_unique<Dashboard>(*gateway, dopts);
    dashboard->mount(gateway->http_server());
    EXPECT_TRUE(gateway->start().ok());
  }
  ~Router() {
    gateway->stop();
    dashboard->stop();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(gateway->port()) + path;
  }
  http::Response get(const std::string& path, http::Headers headers = {}) const {
    auto r = http::fetch({.method = "GET", .url = url(path), .headers = std::move(headers), .timeout_ms = 5000});
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : http::Response{};
  }
  // Polls the state until `ready` holds (the sampler runs on its own thread), at most ~10 s.
  json state_when(const std::function<bool(const json&)>& ready) const {
    json s;
    for (int i = 0; i < 200; ++i) {
      s = json::parse(get("/dashboard/api/state").body, nullptr, false);
      if (s.is_object() && ready(s)) return s;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "state never got ready: " << s.dump();
    return s;
  }
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<Dashboard> dashboard;
};

TEST(Dashboard, ShowsThePlannersHistoryFromTheControlPlane) {
  ctrl::EmbeddedServer store_server;
  ASSERT_TRUE(store_server.start("127.0.0.1", 0).ok());
  const std::string store_url = "http://127.0.0.1:" + std::to_string(store_server.port());
  auto writer = std::move(ctrl::make_store("embedded", store_url)).value();
  Router router;
  router.dashboard->start(std::move(ctrl::make_store("embedded", store_url)).value());

  json absent = router.state_when([](const json& s) { return s["planner"]["status"] != "no_ctrl"; });
  EXPECT_EQ(absent["planner"]["status"], "absent") << "no key yet: no planner";

  const json history = {{"updated_ms", 1700000005000},
                        {"state", "acting"},
                        {"reason", "decode queue grew"},
                        {"decisions",
                         {{{"ts_ms", 1700000004000},
                           {"action", "re-role"},
                           {"node", "prefill-0"},
                           {"from", "prefill"},
                           {"to", "decode"},
                           {"reason", "long answers"},
                           {"predicted_gain", 0.23},
                           {"applied", true}}}}};
  ASSERT_TRUE(writer->put(std::string(kPlannerDecisionsKey), history.dump()).ok());
  // A key that merely starts with the planner's is not the planner's.
  ASSERT_TRUE(writer->put(std::string(kPlannerDecisionsKey) + "-old", "garbage").ok());
  json s = router.state_when([](const json& s) { return s["planner"]["status"] == "ok"; });
  const json& p = s["planner"];
  EXPECT_EQ(p["state"], "acting");
  EXPECT_EQ(p["reason"], "decode queue grew");
  ASSERT_EQ(p["decisions"].size(), 1u);
  EXPECT_EQ(p["decisions"][0]["action"], "re-role");
  EXPECT_EQ(p["decisions"][0]["node"], "prefill-0");
  EXPECT_EQ(p["decisions"][0]["to"], "decode");
  EXPECT_DOUBLE_EQ(p["decisions"][0]["predicted_gain"].get<double>(), 0.23);

  ASSERT_TRUE(writer->put(std::string(kPlannerDecisionsKey), R"({"state":7})").ok());
  s = router.state_when([](const json& s) { return s["planner"]["status"] == "invalid"; });
  EXPECT_NE(s["planner"]["error"].get<std::string>().find("updated_ms"), std::string::npos) << s["planner"];

  ASSERT_TRUE(writer->remove(std::string(kPlannerDecisionsKey)).ok());
  router.state_when([](const json& s) { return s["planner"]["status"] == "absent"; });

  store_server.stop();  // the control plane goes away: said so, not shown as the last good value
  s = router.state_when([](const json& s) { return s["planner"]["status"] == "unreachable"; });
  EXPECT_FALSE(s["planner"]["error"].get<std::string>().empty());
}

TEST(Dashboard, WithoutAControlPlaneThereIsNoPlanner) {
  Router router;
  router.dashboard->start(nullptr);
  json s = router.state_when([](const json& s) { return true; });
  EXPECT_EQ(s["planner"]["status"], "no_ctrl");
}

TEST(Dashboard, NodesLinksAndLiveSeries) {
  ScriptedNode prefill("prefill", "cpu");
  ScriptedNode decode("decode", "opencl", prefill.url());
  Router router;
  router.dashboard->start(nullptr);
  router.gateway->on_node_added({prefill.url(), 0, "", "", ""});
  router.gateway->on_node_added({decode.url(), 0, "", "", ""});

  // Link rates need two samples of the counter; nodes need their roles learnt.
  json s = router.state_when([&](const json& s) {
    return s["nodes"].size() == 2 && s["link"]["pairs"].size() == 1 && s["link"]["pairs"][0]["bytes_per_s"] > 0 &&
           s["nodes"][0]["role"] != "unknown" && s["nodes"][1]["role"] != "unknown" &&
           !s["nodes"][0]["models"].empty() && !s["nodes"][1]["models"].empty();
  });
  for (const json& n : s["nodes"]) {
    const bool is_decode = n["url"] == decode.url();
    EXPECT_EQ(n["role"], is_decode ? "decode" : "prefill");
    EXPECT_EQ(n["models"], json::array({"m"})) << "the model each node serves, from its /health";
    EXPECT_EQ(n["backend"], is_decode ? "opencl" : "cpu");
    EXPECT_EQ(n["device"], is_decode ? "opencl device 0" : "cpu device 0");
    EXPECT_EQ(n["healthy"], true);
    EXPECT_EQ(n["kv_blocks_used"], 16);
    EXPECT_EQ(n["kv_blocks_total"], 64);
    EXPECT_DOUBLE_EQ(n["kv_use"].get<double>(), 0.25);
    EXPECT_EQ(n["waiting"], 1);
    EXPECT_EQ(n["running"], 2);
  }
  const json& pair = s["link"]["pairs"][0];
  EXPECT_EQ(pair["prefill"], prefill.url());
  EXPECT_EQ(pair["decode"], decode.url());
  EXPECT_GT(pair["bytes_total"].get<double>(), 0);
  EXPECT_EQ(s["link"]["t"].size(), s["link"]["bytes_per_s"].size());
  EXPECT_EQ(s["kv"]["nodes"][decode.url()].size(), s["kv"]["t"].size());

  // Streamed requests through the router fill the per-second series (they show once their second is over).
  for (int i = 0; i < 3; ++i) {
    auto r = http::fetch({.method = "POST",
                          .url = router.url("/v1/completions"),
                          .headers = {{"content-type", "application/json"}},
                          .body = R"({"model":"m","prompt":"hi","max_tokens":3,"stream":true})",
                          .timeout_ms = 5000});
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->status, 200);
  }
  s = router.state_when([](const json& s) {
    int64_t n = 0;
    for (const json& x : s["series"]["requests"]) n += x.get<int64_t>();
    return n >= 3;
  });
  const json& series = s["series"];
  int64_t tokens = 0;
  bool ttft = false, tpot = false;
  for (size_t i = 0; i < series["t"].size(); ++i) {
    tokens += series["tokens_per_s"][i].get<int64_t>();
    if (!series["ttft_ms"][i].is_null()) {
      ttft = true;
      EXPECT_GT(series["ttft_ms"][i].get<double>(), 0);
      EXPECT_LT(series["ttft_ms"][i].get<double>(), 5000);
    }
    if (!series["tpot_ms"][i].is_null()) tpot = true;
  }
  EXPECT_TRUE(ttft);
  EXPECT_TRUE(tpot);
  EXPECT_GE(tokens, 9) << "three streams of three tokens";
}

TEST(Dashboard, EveryRouteNeedsTheApiKeyWhenOneIsSet) {
  auto token = std::move(ClusterToken::from_secret(std::string(40, 'z'))).value();
  GatewayOptions go;
  go.api_keys = {"sk-dash"};
  go.cluster_token = token;
  DashboardOptions dopts;
  dopts.api_keys = go.api_keys;
  dopts.cluster_token = token;
  Router router(go, dopts);
  router.dashboard->start(nullptr);
  auto basic = [](const std::string& user_pass) {
    // base64 of the few strings below, written out so the test does not share the decoder it checks.
    if (user_pass == "admin:sk-dash") return std::string("Basic YWRtaW46c2stZGFzaA==");
    if (user_pass == "admin:wrong") return std::string("Basic YWRtaW46d3Jvbmc=");
    if (user_pass == ":zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz") {
      return std::string("Basic Onp6enp6enp6enp6enp6enp6enp6enp6enp6enp6enp6enp6enp6eno=");
    }
    ADD_FAILURE() << user_pass;
    return std::string();
  };
  for (const char* path : {"/dashboard", "/dashboard/", "/dashboard/api/state", "/dashboard/assets/dashboard.js",
                           "/dashboard/assets/uPlot.iife.min.js"}) {
    SCOPED_TRACE(path);
    http::Response none = router.get(path);
    EXPECT_EQ(none.status, 401);
    EXPECT_NE(none.headers["www-authenticate"].find("Basic realm="), std::string::npos);
    EXPECT_EQ(router.get(path, {{"authorization", "Bearer nope"}}).status, 401);
    EXPECT_EQ(router.get(path, {{"authorization", basic("admin:wrong")}}).status, 401);
    EXPECT_EQ(router.get(path, {{"authorization", "Basic !!!not-base64"}}).status, 401);
    EXPECT_EQ(router.get(path, {{std::string(kClusterTokenHeader), "not-the-token"}}).status, 401);
    EXPECT_EQ(router.get(path, {{"authorization", "Bearer sk-dash"}}).status, 200);
    EXPECT_EQ(router.get(path, {{"authorization", basic("admin:sk-dash")}}).status, 200);
    EXPECT_EQ(router.get(path, {{std::string(kClusterTokenHeader), token.secret()}}).status, 200);
    EXPECT_EQ(router.get(path, {{"authorization", basic(":" + token.secret())}}).status, 200);
  }
}

TEST(Dashboard, AssetsAreEmbeddedWithTypesCachingAndAStrictPolicy) {
  Router router;
  router.dashboard->start(nullptr);
  http::Response page = router.get("/dashboard");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers["content-type"], "text/html; charset=utf-8");
  const std::string csp = page.headers["content-security-policy"];
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
  EXPECT_EQ(page.headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(page.headers["cache-control"], "no-cache");
  EXPECT_EQ(page.body.find("<script>"), std::string::npos) << "no inline script";
  EXPECT_EQ(page.body.find("<style"), std::string::npos) << "no inline style";
  EXPECT_EQ(page.body.find("http://"), std::string::npos) << "nothing from another origin";
  EXPECT_EQ(page.body.find("https://"), std::string::npos) << "nothing from another origin";

  // Every asset the page names is served with its type and an ETag that revalidates to 304.
  for (const auto& [name, type] :
       std::vector<std::pair<std::string, std::string>>{{"dashboard.js", "text/javascript; charset=utf-8"},
                                                        {"dashboard.css", "text/css; charset=utf-8"},
                                                        {"uPlot.iife.min.js", "text/javascript; charset=utf-8"},
                                                        {"uPlot.min.css", "text/css; charset=utf-8"}}) {
    SCOPED_TRACE(name);
    EXPECT_NE(page.body.find("/dashboard/assets/" + name), std::string::npos);
    http::Response a = router.get("/dashboard/assets/" + name);
    ASSERT_EQ(a.status, 200);
    EXPECT_EQ(a.headers["content-type"], type);
    EXPECT_FALSE(a.body.empty());
    const std::string etag = a.headers["etag"];
    ASSERT_FALSE(etag.empty());
    EXPECT_EQ(router.get("/dashboard/assets/" + name, {{"if-none-match", etag}}).status, 304);
    EXPECT_EQ(router.get("/dashboard/assets/" + name, {{"if-none-match", "\"other\""}}).status, 200);
  }
  EXPECT_EQ(router.get("/dashboard/assets/nope.js").status, 404);
  EXPECT_EQ(router.get("/dashboard/assets/index.html").status, 404);
  EXPECT_EQ(router.get("/dashboard/assets/../api/state").status, 404);

  // Built with the pinned npm package (scripts/install-deps): the real uPlot is in the binary.
  json s = json::parse(router.get("/dashboard/api/state").body);
  if (dashboard_chart_library().empty()) {
    GTEST_SKIP() << "built without uPlot (web/dashboard/node_modules missing): run scripts/install-deps";
  }
  EXPECT_EQ(s["chart_library"], std::string(dashboard_chart_library()));
  EXPECT_NE(router.get("/dashboard/assets/uPlot.iife.min.js").body.find("uPlot"), std::string::npos);
}

}  // namespace
}  // namespace tessera::router
