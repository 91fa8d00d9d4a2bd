// Issue 20's attacks against a real cluster whose every process holds one cluster token: each is refused.
// A router hosting the control plane (--ctrl-embedded), a prefill node, a decode node and a colocated node
// with an API key register there. Unauthenticated control-plane writes and reads, /admin/*, and
// /internal/pd/* calls get 401 (403 with a wrong token) and change nothing; a client's forged
// `tessera_resume` gets 400 at the router and 403 at a node; client x-tessera-* headers are ignored by a
// node; the cluster still answers (remote prefill over an authenticated link included); and `tessera up`
// creates a 0600 token and a cluster that answers.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;

std::string local(int port) { return "http://127.0.0.1:" + std::to_string(port); }

struct Proc {
  std::unique_ptr<BackgroundProcess> p;
  std::string url;
};

Proc start(std::vector<std::string> args) {
  args.insert(args.begin(), testing::tessera_bin());
  Proc out;
  out.p = std::make_unique<BackgroundProcess>(args);
  const int port = testing::port_from_line(out.p->wait_for_line("listening on"));
  out.url = port > 0 ? local(port) : "";
  return out;
}

http::Headers with_token(const std::string& secret) { return {{std::string(kClusterTokenHeader), secret}}; }

std::string completion_body(const std::string& prompt, int n, const std::string& extra = "") {
  return json{{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}}.dump().insert(1,
                                                                                                                 extra);
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::have_stories260k()) return;
    dir_ = new std::string(testing::scratch_dir());
    const std::string path = *dir_ + "/cluster-token";
    auto t = ClusterToken::create(path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    secret_ = new std::string(t->secret());
    const std::vector<std::string> tok = {"--cluster-token-file", path};
    auto with = [&](std::vector<std::string> a) {
      a.insert(a.end(), tok.begin(), tok.end());
      return a;
    };
    router_ = new Proc(start(with({"route", "--port", "0", "--ctrl-embedded", "--probe-interval-ms", "200"})));
    ASSERT_FALSE(router_->url.empty());
    const std::string model = testing::stories260k_dir();
    prefill_ = new Proc(start(with({"serve", "--model", model, "--port", "0", "--role", "prefill", "--ctrl",
                                    router_->url, "--served-model-name", "stories260K"})));
    ASSERT_FALSE(prefill_->url.empty());
    decode_ = new Proc(start(with({"serve", "--model", model, "--port", "0", "--role", "decode", "--prefill-nodes",
                                   prefill_->url, "--ctrl", router_->url, "--served-model-name", "stories260K"})));
    ASSERT_FALSE(decode_->url.empty());
    keyed_ = new Proc(start(with({"serve", "--model", model, "--port", "0", "--api-key", "sk-test", "--ctrl",
                                  router_->url, "--served-model-name", "stories260K"})));
    ASSERT_FALSE(keyed_->url.empty());
    // Until the router (through the control plane) lists all three nodes.
    for (int i = 0; i < 300; ++i) {
      auto r = http::fetch({.url = router_->url + "/admin/nodes", .headers = with_token(*secret_)});
      if (r.ok() && r->status == 200 && r->body.find(prefill_->url) != std::string::npos &&
          r->body.find(decode_->url) != std::string::npos && r->body.find(keyed_->url) != std::string::npos &&
          r->body.find("\"in_rotation\":false") == std::string::npos) {
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "the router did not discover the nodes";
  }
  static void TearDownTestSuite() {
    for (Proc* p : {router_, keyed_, decode_, prefill_}) delete p;
    delete secret_;
    delete dir_;
  }
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    ASSERT_NE(router_, nullptr);
  }

  static inline std::string* dir_ = nullptr;
  static inline std::string* secret_ = nullptr;
  static inline Proc* router_ = nullptr;
  static inline Proc* prefill_ = nullptr;
  static inline Proc* decode_ = nullptr;
  static inline Proc* keyed_ = nullptr;
};

TEST_F(SecurityTest, InternalPdRoutesNeedTheToken) {
  for (const std::string& node : {prefill_->url, decode_->url}) {
    auto none = http::fetch({.url = node + "/internal/pd/info"});
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->status, 401) << node;
    EXPECT_EQ(none->body.find("agent"), std::string::npos);
    auto wrong = http::fetch({.url = node + "/internal/pd/info", .headers = with_token(std::string(64, '0'))});
    ASSERT_TRUE(wrong.ok());
    EXPECT_EQ(wrong->status, 403) << node;
    auto right = http::fetch({.url = node + "/internal/pd/info", .headers = with_token(*secret_)});
    ASSERT_TRUE(right.ok());
    EXPECT_EQ(right->status, 200) << node;
    // The KV events say which prompts a node holds (by block hash): the router's, not the world's.
    auto events = http::fetch({.url = node + "/internal/kv/events"});
    ASSERT_TRUE(events.ok());
    EXPECT_EQ(events->status, 401) << node;
    EXPECT_EQ(events->body.find("held"), std::string::npos);
    auto events_ok = http::fetch({.url = node + "/internal/kv/events", .headers = with_token(*secret_)});
    ASSERT_TRUE(events_ok.ok());
    EXPECT_EQ(events_ok->status, 200) << node;
  }
  // A prefill call without the token is refused before any work (it froze HTTP threads for 5 s before).
  const auto t0 = std::chrono::steady_clock::now();
  auto prefill = http::fetch({.method = "POST",
                              .url = prefill_->url + "/internal/pd/prefill",
                              .body = R"({"prompt": [1, 2, 3], "tag": 1})",
                              .timeout_ms = 5000});
  ASSERT_TRUE(prefill.ok());
  EXPECT_EQ(prefill->status, 401);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST_F(SecurityTest, ControlPlaneAndAdminNeedTheToken) {
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"/v1/ctrl/kv/put", R"({"key": "/tessera/nodes/evil", "value": "{\"address\":\"http://127.0.0.1:9\"}"})"},
      {"/v1/ctrl/kv/delete", R"({"key": "/tessera/nodes/x"})"},
      {"/v1/ctrl/kv/range", R"({"prefix": "/tessera/"})"},
      {"/v1/ctrl/lease/grant", R"({"ttl_ms": 9223372036854775807})"},
      {"/admin/nodes", "{\"url\": \"http://127.0.0.1:9\"}"},
      {"/admin/nodes/remove", "{\"url\": \"" + decode_->url + "\"}"},
      {"/admin/nodes/drain", "{\"url\": \"" + decode_->url + "\"}"}};
  for (const auto& [path, body] : calls) {
    auto none = http::fetch({.method = "POST", .url = router_->url + path, .body = body});
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->status, 401) << path;
    auto wrong =
        http::fetch({.method = "POST", .url = router_->url + path, .headers = with_token("nope"), .body = body});
    ASSERT_TRUE(wrong.ok());
    EXPECT_EQ(wrong->status, 403) << path;
  }
  auto list = http::fetch({.url = router_->url + "/admin/nodes"});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->status, 401);
  // Nothing changed: the same three nodes, all in rotation.
  list = http::fetch({.url = router_->url + "/admin/nodes", .headers = with_token(*secret_)});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->status, 200);
  json nodes = json::parse(list->body)["nodes"];
  EXPECT_EQ(nodes.size(), 3u) << list->body;
  for (const json& n : nodes) EXPECT_TRUE(n["in_rotation"].get<bool>()) << n.dump();
  EXPECT_EQ(list->body.find("127.0.0.1:9\""), std::string::npos);
}

TEST_F(SecurityTest, ForgedResumeIsRefused) {
  const std::string forged = R"("tessera_resume": {"tokens": [1, 2, 3], "text_bytes": 0, "id": "x"}, )";
  auto at_router = http::fetch(
      {.method = "POST", .url = router_->url + "/v1/completions", .body = completion_body("Once", 4, forged)});
  ASSERT_TRUE(at_router.ok());
  EXPECT_EQ(at_router->status, 400) << at_router->body;
  EXPECT_NE(at_router->body.find("tessera_resume"), std::string::npos);
  // Spelled with an escape, the key is the same key once parsed.
  const std::string escaped = R"("tessera\u005fresume": {"tokens": [1]}, )";
  auto escaped_router = http::fetch(
      {.method = "POST", .url = router_->url + "/v1/completions", .body = completion_body("Once", 4, escaped)});
  ASSERT_TRUE(escaped_router.ok());
  EXPECT_EQ(escaped_router->status, 400);
  // A node reached directly refuses it from a caller without the token...
  auto at_node = http::fetch(
      {.method = "POST", .url = decode_->url + "/v1/completions", .body = completion_body("Once", 4, forged)});
  ASSERT_TRUE(at_node.ok());
  EXPECT_EQ(at_node->status, 403) << at_node->body;
  // ...and honours it from a cluster member (the router continuing a stream).
  auto member = http::fetch({.method = "POST",
                             .url = decode_->url + "/v1/completions",
                             .headers = with_token(*secret_),
                             .body = completion_body("Once", 4, forged)});
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->status, 200) << member->body;
}

TEST_F(SecurityTest, ClientInternalHeadersAreIgnoredByNodes) {
  // x-tessera-token-ids from a client: no token-id comments in its stream.
  auto stream = [&](const http::Headers& extra) {
    http::Headers h = extra;
    h["x-tessera-token-ids"] = "1";
    std::string body =
        json{{"model", "stories260K"}, {"prompt", "Once upon"}, {"max_tokens", 4}, {"stream", true}}.dump();
    auto r = http::fetch({.method = "POST", .url = keyed_->url + "/v1/completions", .headers = h, .body = body});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->body : std::string();
  };
  const std::string client = stream({{"Authorization", "Bearer sk-test"}});
  EXPECT_NE(client.find("data: [DONE]"), std::string::npos) << client;
  EXPECT_EQ(client.find(": tessera-tokens"), std::string::npos) << client;
  EXPECT_NE(stream(with_token(*secret_)).find(": tessera-tokens"), std::string::npos);
  // x-tessera-prefill-node from a client does not steer the decode node (its router-choice count stays).
  const double before = testing::scrape_metric(decode_->url, "tessera_pd_router_choice_total");
  const std::string long_prompt =
      "Once upon a time there was a little girl named Lily who loved to play in the park with her dog and "
      "her friends every single sunny day of the summer";
  auto direct = http::fetch({.method = "POST",
                             .url = decode_->url + "/v1/completions",
                             .headers = {{"x-tessera-prefill-node", prefill_->url}},
                             .body = completion_body(long_prompt, 2)});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->status, 200);
  EXPECT_EQ(testing::scrape_metric(decode_->url, "tessera_pd_router_choice_total"), before);
  auto member = http::fetch(
      {.method = "POST",
       .url = decode_->url + "/v1/completions",
       .headers = {{"x-tessera-prefill-node", prefill_->url}, {std::string(kClusterTokenHeader), *secret_}},
       .body = completion_body("The big red fox jumped over the lazy brown dog while the cat watched from the "
                               "window of the old house at the end of the long and winding road in town",
                               2)});
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->status, 200);
  EXPECT_EQ(testing::scrape_metric(decode_->url, "tessera_pd_router_choice_total"), before + 1);
}

TEST_F(SecurityTest, ApiKeyGuardsTheNodeButNotHealth) {
  const std::string body = completion_body("Once", 4);
  auto none = http::fetch({.method = "POST", .url = keyed_->url + "/v1/completions", .body = body});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 401);
  auto wrong = http::fetch({.method = "POST",
                            .url = keyed_->url + "/v1/completions",
                            .headers = {{"Authorization", "Bearer sk-wrong"}},
                            .body = body});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 401);
  auto models = http::fetch({.url = keyed_->url + "/v1/models"});
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->status, 401);
  auto right = http::fetch({.method = "POST",
                            .url = keyed_->url + "/v1/completions",
                            .headers = {{"Authorization", "Bearer sk-test"}},
                            .body = body});
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->status, 200);
  auto health = http::fetch({.url = keyed_->url + "/health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
}

TEST_F(SecurityTest, TheClusterStillAnswersWithRemotePrefillOverTheAuthenticatedLink) {
  const double remote_before = testing::scrape_metric(decode_->url, "tessera_pd_requests_total{path=\"remote\"}");
  for (int i = 0; i < 6; ++i) {
    const std::string prompt = "Request " + std::to_string(i) +
                               ": once upon a time a small bird flew over the hill to find the big tree where all of "
                               "its friends were singing songs in the warm morning light";
    EXPECT_FALSE(testing::complete_greedy(router_->url, prompt, 4).empty());
  }
  EXPECT_GT(testing::scrape_metric(decode_->url, "tessera_pd_requests_total{path=\"remote\"}"), remote_before);
  EXPECT_EQ(testing::scrape_metric(decode_->url, "tessera_pd_requests_total{path=\"fallback\"}"), 0);
}

// `tessera up` makes one token per cluster (0600, in its run folder), gives it to every process, and the
// cluster answers; its internal planes refuse a caller without the token.
TEST(SecurityUp, UpCreatesATokenAndTheClusterAnswers) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir();
  const std::string spec = dir + "/cluster.yaml";
  std::ofstream(spec) << "model: " << testing::stories260k_dir()
                      << "\nchat_template: plain\nrouter: {port: 0, strategy: round_robin}\nnodes:\n"
                         "  - {name: prefill-0, role: prefill, backend: ref}\n"
                         "  - {name: decode-0, role: decode, backend: ref}\n";
  BackgroundProcess up({testing::tessera_bin(), "up", spec});
  const std::string line = up.wait_for_line("cluster ready", 120);
  ASSERT_FALSE(line.empty());
  const size_t at = line.find("http://"), v1 = line.find("/v1", at);
  ASSERT_NE(at, std::string::npos);
  const std::string router = line.substr(at, v1 - at);
  const size_t logs_at = line.find("logs in ");
  ASSERT_NE(logs_at, std::string::npos);
  std::string logs = line.substr(logs_at + 8);
  logs = logs.substr(0, logs.find(')'));
  struct stat st {};
  ASSERT_EQ(stat((logs + "/cluster-token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(testing::complete_greedy(router, "Once upon a time", 8).empty());
  auto admin = http::fetch({.url = router + "/admin/nodes"});
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->status, 401);
  auto token = ClusterToken::load(logs + "/cluster-token");
  ASSERT_TRUE(token.ok()) << token.status().to_string();
  auto with = http::fetch({.url = router + "/admin/nodes", .headers = with_token(token->secret())});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->status, 200);
  EXPECT_EQ(up.stop(SIGTERM, 30), 0);
}

}  // namespace
}  // namespace tessera
