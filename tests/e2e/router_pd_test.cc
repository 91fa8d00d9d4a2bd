// Router PD mode with real processes: `tessera route` in front of one decode node and two prefill nodes
// chooses the prefill node for each request and names it to the decode node (x-tessera-prefill-node), which
// prefills there first. The decode node's own --prefill-nodes lists only the first prefill node, so work on
// the second can only come from the router's choice; greedy text equals the decode node's own path.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::scrape_metric;

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;

using Proc = testing::TesseraServer;
Proc start(std::vector<std::string> args) { return testing::start_tessera(std::move(args)); }

Proc start_node(std::vector<std::string> extra) {
  std::vector<std::string> args = {"serve", "--model", testing::stories260k_dir(), "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(args);
}

struct Answer {
  std::string text;
  std::string prefill_node;  // the router's x-tessera-prefill-node response header
};

Answer complete(const std::string& url, const std::string& prompt) {
  auto r = http::fetch(
      {.method = "POST",
       .url = url + "/v1/completions",
       .headers = {{"Content-Type", "application/json"}},
       .body = json{{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}}.dump(),
       .timeout_ms = 60000});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  Answer a;
  a.text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
  auto h = r->headers.find("x-tessera-prefill-node");
  if (h != r->headers.end()) a.prefill_node = h->second;
  return a;
}

bool roles_known(const std::string& router, size_t n) {
  auto r = http::fetch({.url = router + "/admin/nodes", .timeout_ms = 2000});
  if (!r.ok() || r->status != 200) return false;
  const json all = json::parse(r->body, nullptr, false);
  if (!all.is_object() || !all.contains("nodes")) return false;
  size_t known = 0;
  for (const auto& node : all["nodes"]) known += node.value("role", "").empty() ? 0 : 1;
  return known == n;
}

bool drain(const std::string& router, const std::string& node, bool on) {
  auto r = http::fetch({.method = "POST",
                        .url = router + "/admin/nodes/drain",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = json{{"url", node}, {"drain", on}}.dump()});
  return r.ok() && r->status == 200;
}

TEST(RouterPdEndToEnd, TheRoutersPrefillChoiceIsHonoured) {
  TS_REQUIRE_STORIES260K();
  Proc p1 = start_node({"--role", "prefill"});
  Proc p2 = start_node({"--role", "prefill"});
  ASSERT_FALSE(p1.url.empty());
  ASSERT_FALSE(p2.url.empty());
  Proc decode = start_node({"--role", "decode", "--prefill-nodes", p1.url, "--pd-min-tokens", "4"});
  ASSERT_FALSE(decode.url.empty());
  Proc router = start(
      {"route", "--port", "0", "--probe-interval-ms", "100", "--nodes", decode.url + "," + p1.url + "," + p2.url});
  ASSERT_FALSE(router.url.empty());
  for (int i = 0; i < 100 && !roles_known(router.url, 3); ++i) std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(roles_known(router.url, 3)) << "the router never learnt the nodes' roles from /internal/pd/info";

  const std::vector<std::string> prompts = {"Once upon a time, there was a little girl named",
                                            "Lily went to the park with her mom and she saw",
                                            "The cat sat on the mat and looked at the big dog"};
  // The decode node's own path (its list: p1 only) is the reference text.
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(complete(decode.url, p).text);
  EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 3.0);
  const double p2_tokens_before = scrape_metric(p2.url, "tessera_prompt_tokens_total{model=\"stories260K\"}");
  EXPECT_EQ(p2_tokens_before, 0.0) << "p2 is in no decode node's list: only the router can send it work";

  // p1 drained in the router: every pair is (decode, p2).
  ASSERT_TRUE(drain(router.url, p1.url, true));
  for (size_t i = 0; i < prompts.size(); ++i) {
    Answer a = complete(router.url, prompts[i]);
    EXPECT_EQ(a.prefill_node, p2.url);
    EXPECT_EQ(a.text, want[i]) << prompts[i];
  }
  EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_router_choice_total"), 3.0);
  EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 6.0);
  EXPECT_GT(scrape_metric(p2.url, "tessera_prompt_tokens_total{model=\"stories260K\"}"), 0.0)
      << "the router's choice was not honoured";
  // The other way round: p2 drained, p1 chosen.
  ASSERT_TRUE(drain(router.url, p1.url, false));
  ASSERT_TRUE(drain(router.url, p2.url, true));
  const double p2_tokens = scrape_metric(p2.url, "tessera_prompt_tokens_total{model=\"stories260K\"}");
  EXPECT_EQ(complete(router.url, prompts[0]).prefill_node, p1.url);
  EXPECT_EQ(scrape_metric(p2.url, "tessera_prompt_tokens_total{model=\"stories260K\"}"), p2_tokens);

  // A dead chosen prefill node: the decode node falls back to its own list; the request still completes.
  ASSERT_TRUE(drain(router.url, p2.url, false));
  ASSERT_TRUE(drain(router.url, p1.url, true));
  EXPECT_EQ(p2.p->stop(SIGKILL), 128 + SIGKILL);
  Answer fallback = complete(router.url, prompts[1]);
  EXPECT_EQ(fallback.text, want[1]);
  EXPECT_EQ(router.p->stop(SIGTERM), 0);
  EXPECT_EQ(decode.p->stop(SIGTERM), 0);
  EXPECT_EQ(p1.p->stop(SIGTERM), 0);
}

}  // namespace
}  // namespace tessera
