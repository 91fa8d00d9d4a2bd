// The sampling and batching fields through `tessera route` in prefill/decode mode, with real processes: a
// prefill node, a decode node that prefills there, and a colocated node as the reference. n > 1 is prefilled
// once on the prefill node, which draws every choice's first token (choice i with seed + i), and the decode node
// continues each from the one KV import: the choices equal the colocated node's. min_tokens reaches the prefill
// node (the first token may not be EOS), prompt lists and streamed choices keep OpenAI's order, echo with
// logprobs and max_tokens 0 scores the prompt (computed on the decode node itself, where the logits are), and the
// router forwards /tokenize and /detokenize.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::scrape_metric;

struct Proc {
  std::unique_ptr<BackgroundProcess> p;
  std::string url;
};

Proc start(std::vector<std::string> args) {
  args.insert(args.begin(), testing::tessera_bin());
  Proc out;
  out.p = std::make_unique<BackgroundProcess>(args);
  const int port = testing::port_from_line(out.p->wait_for_line("listening on"));
  out.url = port > 0 ? "http://127.0.0.1:" + std::to_string(port) : "";
  return out;
}

Proc start_node(std::vector<std::string> extra) {
  std::vector<std::string> args = {"serve", "--model", testing::stories260k_dir(), "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(args);
}

json post(const std::string& url, const std::string& route, const json& body, int want = 200) {
  auto r = http::fetch({.method = "POST",
                        .url = url + route,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 60000});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return json();
  EXPECT_EQ(r->status, want) << route << " " << body.dump() << " -> " << r->body;
  return json::parse(r->body, nullptr, false);
}

// The data events of a streamed answer, [DONE] as the string "[DONE]".
std::vector<json> stream(const std::string& url, json body) {
  body["stream"] = true;
  auto r = http::fetch({.method = "POST",
                        .url = url + "/v1/completions",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 60000});
  EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
  std::vector<json> out;
  if (!r.ok()) return out;
  for (size_t at = r->body.find("data: "); at != std::string::npos; at = r->body.find("data: ", at + 1)) {
    const size_t end = r->body.find("\n\n", at);
    const std::string payload = r->body.substr(at + 6, end - at - 6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
  }
  return out;
}

class SamplingPd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::have_stories260k()) return;
    prefill_ = new Proc(start_node({"--role", "prefill"}));
    decode_ = new Proc(start_node({"--role", "decode", "--prefill-nodes", prefill_->url, "--pd-min-tokens", "4"}));
    colocated_ = new Proc(start_node({}));
    router_ = new Proc(
        start({"route", "--port", "0", "--probe-interval-ms", "100", "--nodes", decode_->url + "," + prefill_->url}));
    // The router pairs nodes once it knows their roles (GET /internal/pd/info).
    for (int i = 0; i < 100; ++i) {
      auto r = http::fetch({.url = router_->url + "/admin/nodes", .timeout_ms = 2000});
      if (r.ok() && r->body.find("\"role\":\"prefill\"") != std::string::npos &&
          r->body.find("\"role\":\"decode\"") != std::string::npos)
        break;
      std::this_thread::sleep_for(50ms);
    }
  }
  static void TearDownTestSuite() {
    for (Proc** p : {&router_, &decode_, &prefill_, &colocated_}) {
      delete *p;
      *p = nullptr;
    }
  }
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    ASSERT_FALSE(router_->url.empty() || decode_->url.empty() || prefill_->url.empty() || colocated_->url.empty());
  }
  static double remote() { return scrape_metric(decode_->url, "tessera_pd_requests_total{path=\"remote\"}"); }
  static double prefilled() {
    return scrape_metric(prefill_->url, "tessera_prompt_tokens_total{model=\"stories260K\"}");
  }

  static inline Proc *prefill_ = nullptr, *decode_ = nullptr, *colocated_ = nullptr, *router_ = nullptr;
};

TEST_F(SamplingPd, NChoicesArePrefilledOnceRemotelyAndEqualTheColocatedNode) {
  const json body = {{"model", "stories260K"},
                     {"prompt", "Once upon a time, there was a little girl named Lily who"},
                     {"max_tokens", 16},
                     {"temperature", 0.8},
                     {"seed", 9},
                     {"n", 4}};
  const double remote_before = remote(), prefilled_before = prefilled();
  const json pd = post(router_->url, "/v1/completions", body);
  const json local = post(colocated_->url, "/v1/completions", body);
  ASSERT_EQ(pd["choices"].size(), 4u);
  EXPECT_EQ(remote() - remote_before, 1.0) << "one request, prefilled remotely";
  EXPECT_EQ(prefilled() - prefilled_before, pd["usage"]["prompt_tokens"].get<double>()) << "one prefill for four";
  std::set<std::string> texts;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(pd["choices"][i]["index"], i);
    EXPECT_EQ(pd["choices"][i]["text"], local["choices"][i]["text"]) << "choice " << i;
    texts.insert(pd["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u);
  EXPECT_EQ(pd["usage"], local["usage"]);
}

TEST_F(SamplingPd, MinTokensMasksEosOnThePrefillNodeToo) {
  const double before = remote();
  // stories260K's EOS is token 2 (llama2.c); with +100 it is every step's choice once allowed.
  const json r = post(router_->url, "/v1/completions",
                      {{"model", "stories260K"},
                       {"prompt", "Once upon a time, there was a big dog"},
                       {"max_tokens", 20},
                       {"temperature", 0},
                       {"logit_bias", {{"2", 100}}},
                       {"min_tokens", 3}});
  EXPECT_EQ(remote() - before, 1.0);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 4) << "three tokens, then EOS";
}

TEST_F(SamplingPd, PromptListsAndStreamedChoicesKeepOpenAisOrder) {
  const json body = {{"model", "stories260K"},
                     {"prompt", json::array({"Lily went to the park and saw", "The little dog ran to the"})},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"n", 2}};
  const json whole = post(router_->url, "/v1/completions", body);
  ASSERT_EQ(whole["choices"].size(), 4u);
  for (int p = 0; p < 2; ++p) {
    const std::string one = testing::complete_greedy(colocated_->url, body["prompt"][p], 8);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(whole["choices"][p * 2 + i]["text"], one) << p << " " << i;
  }
  std::vector<json> events = stream(router_->url, body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::map<int, std::string> text;
  std::set<int> finished;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    for (const json& c : e["choices"]) {
      text[c["index"].get<int>()] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finished.insert(c["index"].get<int>());
    }
  }
  EXPECT_EQ(finished, (std::set<int>{0, 1, 2, 3}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(text[i], whole["choices"][i]["text"]) << i;
}

TEST_F(SamplingPd, EchoWithLogprobsAndNoNewTokensScoresThePrompt) {
  const json body = {{"model", "stories260K"},
                     {"prompt", "Once upon a time, there was a little girl"},
                     {"max_tokens", 0},
                     {"echo", true},
                     {"logprobs", 2}};
  const json pd = post(router_->url, "/v1/completions", body);
  const json local = post(colocated_->url, "/v1/completions", body);
  const json& lp = pd["choices"][0]["logprobs"];
  EXPECT_EQ(pd["choices"][0]["text"], "Once upon a time, there was a little girl");
  EXPECT_EQ(pd["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(pd["usage"]["completion_tokens"], 0);
  ASSERT_EQ(lp["tokens"].size(), pd["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < lp["token_logprobs"].size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(),
                local["choices"][0]["logprobs"]["token_logprobs"][i].get<double>(), 1e-4);
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
  }
  // vLLM's prompt_logprobs: null first, then the prompt token with its rank among the top alternatives.
  const json pl =
      post(router_->url, "/v1/completions",
           {{"model", "stories260K"}, {"prompt", body["prompt"]}, {"max_tokens", 1}, {"prompt_logprobs", 1}});
  const json& entries = pl["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(entries.size(), lp["tokens"].size());
  EXPECT_TRUE(entries[0].is_null());
  for (size_t i = 1; i < entries.size(); ++i) {
    ASSERT_TRUE(entries[i].is_object());
    for (const auto& [id, e] : entries[i].items()) {
      EXPECT_GE(e["rank"].get<int>(), 1);
      EXPECT_LE(e["logprob"].get<double>(), 0.0);
    }
  }
}

TEST_F(SamplingPd, TheRouterForwardsTokenizeAndDetokenize) {
  const json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}};
  const json via_router = post(router_->url, "/tokenize", body);
  EXPECT_EQ(via_router, post(colocated_->url, "/tokenize", body));
  EXPECT_GT(via_router["count"].get<int>(), 2);
  const json text = post(router_->url, "/detokenize", {{"model", "stories260K"}, {"tokens", via_router["tokens"]}});
  EXPECT_NE(text["prompt"].get<std::string>().find("Once upon a time"), std::string::npos);
  post(router_->url, "/tokenize", {{"model", "stories260K"}, {"prompt", 7}}, 400);  // the node's own validation
}

}  // namespace
}  // namespace tessera
