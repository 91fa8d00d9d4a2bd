// `tessera serve` with a hybrid model (Qwen3.5's shape at test size): concurrent requests under a KV budget that
// forces preemption give each prompt the text it gets alone (a preempted sequence frees its recurrent-state slot and
// starts again from a fresh state), n = 3 greedy choices equal one choice, and every slot is free afterwards. Prefix
// reuse through state checkpoints gives a prompt sent again, and the next turn of its conversation, the text and
// logprobs of a node that computes every prompt whole, with the cached tokens in `usage`. Split over a prefill and a
// decode node (cpu -> cpu, cpu -> opencl, opencl -> cpu), the recurrent state travels with the full layers' KV (the
// wire layout's state section) and the text is the single node's token for token, with the same logprobs; a decode node
// that zeroes the state it receives fails that check (the negative control). Qwen3.5-MoE and Qwen3-MoE split the same
// way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;

std::vector<std::string> complete(const std::string& url, const std::vector<int>& prompt, int n, int tokens,
                                  const std::string& model = "h") {
  auto r = http::fetch(
      {.method = "POST",
       .url = url + "/v1/completions",
       .headers = {{"Content-Type", "application/json"}},
       .body =
           json{{"model", model}, {"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0}, {"n", n}}.dump()});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body, nullptr, false);
  std::vector<std::string> out;
  if (body.is_object() && body.contains("choices"))
    for (const json& c : body["choices"]) out.push_back(c["text"].get<std::string>());
  return out;
}

// A family's shape at test size, `layers` layers (testing::synth_small_gguf), in the test's scratch directory.
std::string synth_model(const std::string& name, int layers, const std::string& shape = "qwen3.5-0.8b",
                        const std::vector<std::string>& extra = {}) {
  return testing::synth_small_gguf(testing::scratch_dir() + "/" + name, shape, layers, extra);
}

struct Node {
  std::unique_ptr<testing::BackgroundProcess> proc;
  std::string url;
};

Node start_node(const std::string& model, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {testing::tessera_bin(), "serve", "--model", model, "--port", "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Node n;
  n.proc = std::make_unique<testing::BackgroundProcess>(argv);
  const int port = testing::port_from_line(n.proc->wait_for_line("listening on"));
  EXPECT_GT(port, 0);
  n.url = "http://127.0.0.1:" + std::to_string(port);
  return n;
}

TEST(HybridServe, PreemptedAndForkedSequencesKeepTheirTextAndFreeTheirState) {
  const std::string model = synth_model("h.gguf", 2);
  ASSERT_FALSE(model.empty());
  // 0.4 MiB: the state of 4 sequences, then 46 blocks of 16 positions, under two full contexts of 512.
  testing::BackgroundProcess node({testing::tessera_bin(), "serve", "--model", model, "--port", "0", "--backend", "cpu",
                                   "--threads", "2", "--max-num-seqs", "4", "--kv-memory", "0.4"});
  const int port = testing::port_from_line(node.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string labels = "{model=\"h\"}";
  EXPECT_EQ(testing::scrape_metric(url, "tessera_prefix_cache_enabled" + labels), 1);
  EXPECT_EQ(testing::scrape_metric(url, "tessera_recurrent_state_slots_total" + labels), 4);
  EXPECT_GE(testing::scrape_metric(url, "tessera_state_checkpoints_total" + labels), 1);

  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back({1, 300 + i, 17, 42, 99, 7 + i, 250, 3});
  constexpr int kTokens = 200;
  std::vector<std::string> alone;
  for (const auto& p : prompts) alone.push_back(complete(url, p, 1, kTokens).at(0));
  std::vector<std::string> together(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] { together[i] = complete(url, prompts[i], 1, kTokens).at(0); });
  for (auto& t : clients) t.join();
  EXPECT_EQ(together, alone);
  EXPECT_GE(testing::scrape_metric(url, "tessera_preemptions_total" + labels), 1);

  const std::vector<std::string> three = complete(url, prompts[0], 3, 24);
  ASSERT_EQ(three.size(), 3u);
  for (const std::string& t : three) EXPECT_EQ(t, alone[0].substr(0, t.size()));
  EXPECT_EQ(three[0], three[1]);
  EXPECT_EQ(three[1], three[2]);
  EXPECT_EQ(testing::scrape_metric(url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(node.stop(SIGTERM), 0);
}

// Sliding-window layers keeping only their windows (engine/kv_cache.h), served: a Gemma 2 shape (window 8, every
// other layer sliding) gives the same greedy text alone, four at once, as three choices and with the windows off
// (`--disable-hybrid-kv-cache-manager`), and /metrics shows the window pool and its blocks given back.
TEST(HybridServe, SlidingLayersThatKeepOnlyTheirWindowServeTheWholeCachesText) {
  const std::string model = synth_model("w.gguf", 4, "gemma2-2b");
  ASSERT_FALSE(model.empty());
  const std::vector<std::string> flags = {"--backend", "cpu", "--threads", "2", "--max-num-seqs", "4"};
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back({300 + i, 17, 42, 99, 7 + i, 250, 3, 11, 60, 61, 62, 63, 64});
  constexpr int kTokens = 120;
  const std::string labels = "{model=\"w\"}";
  std::vector<std::string> whole;
  {
    std::vector<std::string> off = flags;
    off.push_back("--disable-hybrid-kv-cache-manager");
    Node n = start_node(model, off);
    for (const auto& p : prompts) whole.push_back(complete(n.url, p, 1, kTokens, "w").at(0));
    EXPECT_EQ(testing::scrape_metric(n.url, "tessera_kv_window_blocks_total" + labels), 0);
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
  }
  Node n = start_node(model, flags);
  std::vector<std::string> alone, together(prompts.size());
  for (const auto& p : prompts) alone.push_back(complete(n.url, p, 1, kTokens, "w").at(0));
  EXPECT_EQ(alone, whole);
  EXPECT_GT(testing::scrape_metric(n.url, "tessera_kv_window_blocks_total" + labels), 0);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] { together[i] = complete(n.url, prompts[i], 1, kTokens, "w").at(0); });
  for (auto& t : clients) t.join();
  EXPECT_EQ(together, whole);
  const std::vector<std::string> three = complete(n.url, prompts[1], 3, 40, "w");
  ASSERT_EQ(three.size(), 3u);
  for (const std::string& t : three) EXPECT_EQ(t, whole[1].substr(0, t.size()));
  // Every request has ended: no window block is held (cached ones are free to take).
  EXPECT_EQ(testing::scrape_metric(n.url, "tessera_kv_window_blocks_used" + labels), 0);
  EXPECT_EQ(n.proc->stop(SIGTERM), 0);
}

// A greedy completion's text and the logprob of each token it chose.
struct Greedy {
  std::string text;
  std::vector<double> logprobs;
  int cached = -1;  // usage.prompt_tokens_details.cached_tokens
};

// A greedy completion (`path`, `body`) as Greedy: the first choice's text and its tokens' logprobs, the cached tokens.
Greedy greedy(const std::string& url, const std::string& path, const json& body_sent) {
  auto r = http::fetch({.method = "POST",
                        .url = url + path,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body_sent.dump()});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body, nullptr, false);
  Greedy g;
  if (!body.is_object() || !body.contains("choices") || body["choices"].empty()) return g;
  const json& c = body["choices"][0];
  const bool chat = c.contains("message");
  g.text = chat ? c["message"].value("content", "") : c["text"].get<std::string>();
  if (body.contains("usage") && body["usage"].contains("prompt_tokens_details"))
    g.cached = body["usage"]["prompt_tokens_details"].value("cached_tokens", -1);
  if (!c["logprobs"].is_object()) return g;
  if (chat) {
    for (const json& lp : c["logprobs"]["content"]) g.logprobs.push_back(lp["logprob"].get<double>());
  } else {
    for (const json& lp : c["logprobs"]["token_logprobs"])
      if (lp.is_number()) g.logprobs.push_back(lp.get<double>());
  }
  return g;
}

Greedy complete_logprobs(const std::string& url, const std::vector<int>& prompt, int tokens, const std::string& model) {
  return greedy(url, "/v1/completions",
                {{"model", model}, {"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0}, {"logprobs", 0}});
}

// The largest difference between the logprobs of the tokens both completions carry, matched from the last token
// back: a decode node gives none for the first token (the prefill node chose it and sends only its id).
double max_logprob_gap(const Greedy& a, const Greedy& b) {
  const size_t n = std::min(a.logprobs.size(), b.logprobs.size());
  double gap = 0;
  for (size_t i = 1; i <= n; ++i)
    gap = std::max(gap, std::abs(a.logprobs[a.logprobs.size() - i] - b.logprobs[b.logprobs.size() - i]));
  return gap;
}

// Whether an OpenCL device is here, asked with a dense model: a hybrid model that opencl refused would fail the test,
// never skip its pairs.
bool opencl_runs_here() {
  auto probe = testing::run_process({testing::tessera_bin(), "generate", "--model", testing::stories260k_dir(),
                                     "--backend", "opencl", "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) std::printf("opencl pairs skipped: %s\n", probe.err.c_str());
  return probe.exit_code == 0;
}

// Both sides' KV in f32: the transfer must change nothing; cpu and opencl differ only in summation order.
const std::vector<std::string> kCpu = {"--backend", "cpu", "--threads", "1", "--kv-dtype", "f32"};
const std::vector<std::string> kOpenCl = {"--backend", "opencl", "--threads", "2", "--kv-dtype", "f32"};
// Logprobs of the same tokens on cpu and opencl, or across a transfer, agree to about 2e-6 here; a decode node that
// lost the recurrent state is off by 0.3 or more.
constexpr double kLogprobTolerance = 1e-4;

// The prompts of the prefix-reuse tests, in order: a first prompt of 41 tokens (its checkpoint at 32, the last block
// boundary before its last token), the same again, its next turn of 60 tokens (checkpoint at 48) twice, and two prompts
// that share its first 20 tokens (a system prompt) and then part: the first of them finds its one cached block without
// a state and takes a checkpoint there, which the second goes on from. Served with reuse they take 0, 32, 32, 48, 0
// and 16 positions from the cache.
std::vector<std::vector<int>> prefix_reuse_prompts() {
  std::vector<int> first;
  for (int i = 0; i < 41; ++i) first.push_back(1 + (37 * i + 11) % 500);
  std::vector<int> next = first;
  for (int i = 0; i < 19; ++i) next.push_back(20 + 13 * i);
  std::vector<int> parted(first.begin(), first.begin() + 20), sibling = parted;
  for (int i = 0; i < 30; ++i) {
    parted.push_back(400 + i);
    sibling.push_back(450 + i);
  }
  return {first, first, next, next, parted, sibling};
}

// Prefix reuse for a hybrid model (engine/kv_cache.h, state checkpoints): a prompt sent again and the next turn of
// its conversation take the cached blocks and the state kept at the first prompt's last block boundary, and give the
// text and logprobs of a node that computes every prompt whole (--state-checkpoints 0, which turns prefix reuse off).
TEST(HybridServe, PrefixReuseThroughStateCheckpointsGivesTheWholePromptsText) {
  const std::string model = synth_model("p.gguf", 4);
  ASSERT_FALSE(model.empty());
  const std::vector<std::vector<int>> prompts = prefix_reuse_prompts();
  const std::vector<int> cached = {0, 32, 32, 48, 0, 16};
  constexpr int kTokens = 24;
  const std::string labels = "{model=\"p\"}";
  std::vector<Greedy> whole;
  {
    std::vector<std::string> off = kCpu;
    off.insert(off.end(), {"--state-checkpoints", "0"});
    Node n = start_node(model, off);
    EXPECT_EQ(testing::scrape_metric(n.url, "tessera_prefix_cache_enabled" + labels), 0);
    EXPECT_EQ(testing::scrape_metric(n.url, "tessera_state_checkpoints_total" + labels), 0);
    for (const auto& p : prompts) whole.push_back(complete_logprobs(n.url, p, kTokens, "p"));
    for (const Greedy& g : whole) EXPECT_EQ(g.cached, 0);
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
  }
  Node n = start_node(model, kCpu);
  EXPECT_EQ(testing::scrape_metric(n.url, "tessera_prefix_cache_enabled" + labels), 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Greedy g = complete_logprobs(n.url, prompts[i], kTokens, "p");
    EXPECT_EQ(g.text, whole[i].text) << "prompt " << i;
    EXPECT_EQ(g.logprobs.size(), whole[i].logprobs.size()) << "prompt " << i;
    EXPECT_LT(max_logprob_gap(g, whole[i]), kLogprobTolerance) << "prompt " << i;
    EXPECT_EQ(g.cached, cached[i]) << "prompt " << i;
  }
  // first at 32, next at 48, parted at 16 and 48, sibling at 48; and where each one's reply ended (its decode's
  // last block boundary, a running checkpoint): first's and next's, kept once each, parted's and sibling's at 64.
  EXPECT_EQ(testing::scrape_metric(n.url, "tessera_state_checkpoints_used" + labels), 9);
  EXPECT_EQ(testing::scrape_metric(n.url, "tessera_prefix_cache_hit_tokens_total" + labels), 32 + 32 + 48 + 16);
  EXPECT_EQ(testing::scrape_metric(n.url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(n.proc->stop(SIGTERM), 0);
}

// A chat completion's greedy text, its tokens' logprobs and the cached prompt tokens from `usage`.
Greedy chat_logprobs(const std::string& url, const json& messages, int tokens, const std::string& model) {
  return greedy(
      url, "/v1/chat/completions",
      {{"model", model}, {"messages", messages}, {"max_tokens", tokens}, {"temperature", 0}, {"logprobs", true}});
}

// The ids a node's template and tokenizer make of `messages` (its /tokenize).
std::vector<int> chat_tokens(const std::string& url, const json& messages) {
  auto r = http::fetch({.method = "POST",
                        .url = url + "/tokenize",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = json{{"messages", messages}}.dump()});
  EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
  if (!r.ok()) return {};
  json body = json::parse(r->body, nullptr, false);
  return body.is_object() && body.contains("tokens") ? body["tokens"].get<std::vector<int>>() : std::vector<int>{};
}

// Chat users sharing a system prompt: the node keeps the state where the first user's message began (the end of the
// system prompt and the next message's opening: serve::shared_start), so the second user's first turn already goes on
// from it (without that hint it found the blocks but no state, and computed its whole prompt), with the text and
// logprobs of a node that computes every prompt whole.
TEST(HybridServe, ASecondChatUserGoesOnFromTheStateAtTheSharedSystemPrompt) {
  const std::string model = synth_model("c.gguf", 4);
  ASSERT_FALSE(model.empty());
  const std::string system =
      "You answer questions about the opening hours of the municipal library, its branches, holidays and events, "
      "in one short sentence, and never about anything else.";
  std::vector<json> users;
  for (const char* q : {"When does the main branch open on Saturday?", "Is the library closed on public holidays?",
                        "Which branch has a reading room?"})
    users.push_back(json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", q}}}));
  constexpr int kTokens = 16;
  std::vector<std::string> flags = kCpu;
  flags.insert(flags.end(), {"--chat-template", "chatml"});
  std::vector<Greedy> whole;
  {
    std::vector<std::string> off = flags;
    off.insert(off.end(), {"--state-checkpoints", "0"});
    Node n = start_node(model, off);
    for (const json& m : users) whole.push_back(chat_logprobs(n.url, m, kTokens, "c"));
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
  }
  Node n = start_node(model, flags);
  const std::vector<int> first = chat_tokens(n.url, users[0]), second = chat_tokens(n.url, users[1]);
  const int shared =
      static_cast<int>(std::mismatch(first.begin(), first.end(), second.begin(), second.end()).first - first.begin());
  ASSERT_GE(shared, 32) << "the system prompt spans blocks of 16";
  for (size_t i = 0; i < users.size(); ++i) {
    const Greedy g = chat_logprobs(n.url, users[i], kTokens, "c");
    EXPECT_EQ(g.text, whole[i].text) << "user " << i;
    EXPECT_EQ(g.logprobs.size(), whole[i].logprobs.size()) << "user " << i;
    EXPECT_LT(max_logprob_gap(g, whole[i]), kLogprobTolerance) << "user " << i;
    // The last block boundary at or before the first token the users do not share.
    EXPECT_EQ(g.cached, i == 0 ? 0 : shared / 16 * 16) << "user " << i;
  }
  EXPECT_EQ(n.proc->stop(SIGTERM), 0);
}

// A chat reply's state is kept (a running checkpoint at the last block boundary its decode crosses) only where the
// next turn sends the reply back as it was generated: chatml renders the history verbatim; Qwen3.5's own template
// opens a think block in the generation prompt and leaves it out of earlier turns (serve::renders_reply_back); and a
// reasoning parser returns the reasoning apart from the content a client sends back. The node's checkpoints after one
// reply say which: the system prompt's end and the prompt's end, and the reply's only with chatml and no parser.
TEST(HybridServe, AChatRepliesStateIsKeptOnlyWhereTheNextTurnRendersItBack) {
  const std::string model = synth_model("r.gguf", 4);
  ASSERT_FALSE(model.empty());
  const std::string qwen35 = testing::llamacpp_templates_dir() + "/Qwen3.5-4B.jinja";
  if (!std::filesystem::exists(qwen35)) GTEST_SKIP() << qwen35 << " is missing (scripts/llamacpp.sh)";
  const json messages = json::array(
      {{{"role", "system"}, {"content", "You answer in one short sentence about the weather in the valley."}},
       {{"role", "user"}, {"content", "Will it rain in the afternoon, and how cold will the night be?"}}});
  const std::vector<std::pair<std::vector<std::string>, int>> cases = {
      {{"--chat-template", "chatml", "--reasoning-parser", "none"}, 3},
      {{"--chat-template", qwen35, "--reasoning-parser", "none"}, 2},
      {{"--chat-template", "chatml", "--reasoning-parser", "qwen3"}, 2}};
  auto post = [](const std::string& url, const std::string& path, const json& body) {
    auto r = http::fetch(
        {.method = "POST", .url = url + path, .headers = {{"Content-Type", "application/json"}}, .body = body.dump()});
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  };
  for (const auto& [extra, kept] : cases) {
    std::vector<std::string> flags = kCpu;
    flags.insert(flags.end(), extra.begin(), extra.end());
    Node n = start_node(model, flags);
    const std::string what = extra[1] + ", reasoning parser " + extra[3];
    // 39 positions computed past the prompt: the reply's state at the last block boundary they cross.
    const json reply = post(n.url, "/v1/chat/completions",
                            {{"model", "r"},
                             {"messages", messages},
                             {"max_tokens", 40},
                             {"temperature", 0},
                             {"ignore_eos", true},
                             {"return_token_ids", true}});
    ASSERT_TRUE(reply.is_object() && reply.contains("prompt_token_ids")) << what;
    const auto prompt = reply["prompt_token_ids"].get<std::vector<int>>();
    const auto ids = reply["choices"][0]["token_ids"].get<std::vector<int>>();
    ASSERT_EQ(ids.size(), 40u) << what;
    // The next turn carries the reply as its text's tokens: the state is kept only if they are the reply's own up to
    // it (random weights write text that often tokenizes otherwise).
    const json back =
        post(n.url, "/tokenize",
             {{"model", "r"}, {"prompt", reply["choices"][0]["message"]["content"]}, {"add_special_tokens", false}});
    const auto back_ids = back.value("tokens", std::vector<int>{});
    const size_t upto = (prompt.size() + 39) / 16 * 16 - prompt.size();
    const bool comes_back = back_ids.size() >= upto && std::equal(ids.begin(), ids.begin() + upto, back_ids.begin());
    const int want = kept == 3 && !comes_back ? 2 : kept;
    EXPECT_EQ(testing::scrape_metric(n.url, "tessera_state_checkpoints_used{model=\"r\"}"), want)
        << what << (comes_back ? "" : ", a reply that does not tokenize back");
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
  }
}

// Prefill on one node, decode on another, for `pairs` of backends: the decode node's greedy text is the single cpu
// node's token for token, and so are the logprobs of its tokens (within kLogprobTolerance). The text alone is a weak
// check on these random-weight models: their greedy text soon settles into a loop that the recurrent state barely
// moves, and with a zeroed state it was the same text here; the logprobs are not. So the negative control (a decode
// node that loads zeros in place of the state it receives, TESSERA_PD_ZERO_STATE) must fail the logprob check.
// `hybrid`: the model carries a recurrent state (the negative control, n = 2 choices and the slots freed are checked).
void check_split(const std::string& model, const std::string& name, bool hybrid) {
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back({1, 300 + i, 17, 42, 99, 7 + i, 250, 3, 64 + i, 11, 500 - i, 9});
  constexpr int kTokens = 48;
  std::vector<Greedy> alone;
  {
    Node single = start_node(model, kCpu);
    for (const auto& p : prompts) alone.push_back(complete_logprobs(single.url, p, kTokens, name));
    EXPECT_EQ(single.proc->stop(SIGTERM), 0);
  }
  for (const Greedy& g : alone) {
    EXPECT_FALSE(g.text.empty());
    EXPECT_GE(g.logprobs.size(), 8u);  // a text may end early, at an end token
  }
  const bool opencl = opencl_runs_here();
  if (opencl) {  // the single opencl node first: the same text, logprobs within the tolerance
    Node single = start_node(model, kOpenCl);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Greedy g = complete_logprobs(single.url, prompts[i], kTokens, name);
      EXPECT_EQ(g.text, alone[i].text) << name << " opencl alone, prompt " << i;
      EXPECT_LT(max_logprob_gap(g, alone[i]), kLogprobTolerance) << name << " opencl alone, prompt " << i;
    }
    EXPECT_EQ(single.proc->stop(SIGTERM), 0);
  }
  struct Pair {
    const char* label;
    std::vector<std::string> prefill, decode;
    bool zero_state = false;
  };
  std::vector<Pair> pairs = {{"cpu -> cpu", kCpu, kCpu}};
  if (opencl) {
    pairs.push_back({"cpu -> opencl", kCpu, kOpenCl});
    pairs.push_back({"opencl -> cpu", kOpenCl, kCpu});
  }
  if (hybrid)
    pairs.push_back(
        {opencl ? "negative control: state zeroed, cpu -> opencl" : "negative control: state zeroed, cpu -> cpu", kCpu,
         opencl ? kOpenCl : kCpu, true});
  for (const Pair& pair : pairs) {
    SCOPED_TRACE(name + ": " + pair.label);
    std::vector<std::string> p = {"--role", "prefill"};
    p.insert(p.end(), pair.prefill.begin(), pair.prefill.end());
    Node prefill = start_node(model, p);
    std::vector<std::string> d = {"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4"};
    d.insert(d.end(), pair.decode.begin(), pair.decode.end());
    if (pair.zero_state) setenv("TESSERA_PD_ZERO_STATE", "1", 1);  // the decode node's copy of the environment
    Node decode = start_node(model, d);
    unsetenv("TESSERA_PD_ZERO_STATE");
    int text_differs = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Greedy got = complete_logprobs(decode.url, prompts[i], kTokens, name);
      const double gap = max_logprob_gap(got, alone[i]);
      if (pair.zero_state) {
        EXPECT_GT(gap, 100 * kLogprobTolerance) << "prompt " << i << ": the check passes without the state";
        text_differs += got.text != alone[i].text;
      } else {
        EXPECT_EQ(got.text, alone[i].text) << "prompt " << i;
        EXPECT_LT(gap, kLogprobTolerance) << "prompt " << i;
        EXPECT_GE(got.logprobs.size() + 1, alone[i].logprobs.size()) << "prompt " << i;  // all but the first
      }
      std::printf("[ pd ] %s %s, prompt %zu: text %s, largest logprob gap %.3g\n", name.c_str(), pair.label, i,
                  got.text == alone[i].text ? "equal" : "differs", gap);
    }
    if (pair.zero_state)
      std::printf("[ pd ] %s: with the state zeroed the text differed on %d of %zu prompts\n", name.c_str(),
                  text_differs, prompts.size());
    EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 3.0);
    EXPECT_GT(testing::scrape_metric(decode.url, "tessera_pd_kv_bytes_total"), 0.0);
    if (std::string(pair.label) == "cpu -> cpu" && hybrid) {
      // Two choices: the first continues from the carried state, the second computes its prompt again in a slot of
      // its own (a hybrid model's state is not forked); both are the single node's greedy text.
      const std::vector<std::string> two = complete(decode.url, prompts[1], 2, kTokens, name);
      ASSERT_EQ(two.size(), 2u);
      EXPECT_EQ(two[0], alone[1].text);
      EXPECT_EQ(two[1], alone[1].text);
    }
    if (hybrid) {
      const std::string labels = "{model=\"" + name + "\"}";
      EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_recurrent_state_slots_used" + labels), 0);
      EXPECT_EQ(testing::scrape_metric(prefill.url, "tessera_recurrent_state_slots_used" + labels), 0);
    }
    EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
    EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);
  }
}

// Prefix reuse through state checkpoints on a prefill node: the same prompts as the single node's test above, split
// over a prefill and a decode node (cpu -> cpu). The prefill node takes the same prefixes from its cache (and restores
// their states) before it computes the rest and sends the full layers' KV and the state after the prompt; the decode
// node's text and logprobs are a node's without reuse.
TEST(HybridServe, PrefixReuseOnAPrefillNodeGivesTheWholePromptsText) {
  const std::string model = synth_model("hp.gguf", 4);
  ASSERT_FALSE(model.empty());
  const std::vector<std::vector<int>> prompts = prefix_reuse_prompts();
  constexpr int kTokens = 24;
  const std::string labels = "{model=\"hp\"}";
  std::vector<Greedy> whole;
  {
    std::vector<std::string> off = kCpu;
    off.insert(off.end(), {"--state-checkpoints", "0"});
    Node n = start_node(model, off);
    for (const auto& p : prompts) whole.push_back(complete_logprobs(n.url, p, kTokens, "hp"));
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
  }
  std::vector<std::string> p = {"--role", "prefill"};
  p.insert(p.end(), kCpu.begin(), kCpu.end());
  Node prefill = start_node(model, p);
  std::vector<std::string> d = {"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4"};
  d.insert(d.end(), kCpu.begin(), kCpu.end());
  Node decode = start_node(model, d);
  EXPECT_EQ(testing::scrape_metric(prefill.url, "tessera_prefix_cache_enabled" + labels), 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Greedy g = complete_logprobs(decode.url, prompts[i], kTokens, "hp");
    EXPECT_EQ(g.text, whole[i].text) << "prompt " << i;
    EXPECT_LT(max_logprob_gap(g, whole[i]), kLogprobTolerance) << "prompt " << i;
  }
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 6.0);
  // What the single node took from its cache, now on the prefill node: 32, 32, 48 and 16 positions.
  EXPECT_EQ(testing::scrape_metric(prefill.url, "tessera_prefix_cache_hit_tokens_total" + labels), 32 + 32 + 48 + 16);
  EXPECT_EQ(testing::scrape_metric(prefill.url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
  EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);
}

// Qwen3.5 split over a prefill and a decode node: the decode node continues from the prefill node's full-layer KV and
// recurrent state (the wire layout's state section). Three layers (linear, full, linear): the state read after the
// last layer, not with the last full layer's KV. cpu -> cpu, and cpu -> opencl, opencl -> cpu where opencl runs.
TEST(HybridServe, PrefillDecodeSplitCarriesTheRecurrentState) {
  const std::string model = synth_model("h3.gguf", 3);
  ASSERT_FALSE(model.empty());
  check_split(model, "h3", /*hybrid=*/true);
}

// Qwen3.5-MoE (linear attention, experts and a gated shared expert) the same way.
TEST(HybridServe, MoePrefillDecodeSplitCarriesTheRecurrentState) {
  const std::string model = synth_model("hm3.gguf", 3, "qwen3.5-35b-a3b");
  ASSERT_FALSE(model.empty());
  check_split(model, "hm3", /*hybrid=*/true);
}

// Qwen3-MoE (no recurrent state; full attention and experts): the KV alone crosses, expert weights never do.
TEST(HybridServe, Qwen3MoePrefillDecodeSplitAcrossCpuAndOpenCl) {
  const std::string model = synth_model("m3.gguf", 2, "qwen3-30b-a3b");
  ASSERT_FALSE(model.empty());
  check_split(model, "m3", /*hybrid=*/false);
}

// Gemma 4 E2B's pattern (test size, 10 layers): sliding layers with narrower K/V than the full ones, and the last
// layers reading earlier layers' K/V. The carried layers are those with K/V of their own, every row as wide as the
// widest (a sliding layer's rows padded); the decode node reads each layer's own width back. --decisive: clear
// winners, so that cpu and opencl's summation orders cannot tip a near tie.
TEST(HybridServe, Gemma4PrefillDecodeSplitCarriesUnlikeWidthsAndSharedKv) {
  const std::string model = synth_model("g4.gguf", 10, "gemma4-e2b", {"--decisive"});
  ASSERT_FALSE(model.empty());
  check_split(model, "g4", /*hybrid=*/false);
}

// Sliding layers that keep only their windows on both sides of a split (engine/kv_cache.h, kv/pd_link): Gemma 4
// E2B's pattern with a window of 8 and prompts of 40 and 42 tokens in steps of 16 on the prefill node. Its sliding
// layers send the rows their window holds; for the second prompt, which finds the first's 32 tokens in its prefix
// cache, the older rows go as zeros (no later step reads them); the decode node (no prefix cache of its own, so it
// asks for every position) keeps only the window of what arrives. Its greedy text and logprobs are a single node's
// that keeps every position.
TEST(HybridServe, SlidingLayersKeepOnlyTheirWindowsOnBothSidesOfASplit) {
  const std::string model = synth_model("g4w.gguf", 10, "gemma4-e2b", {"--decisive", "--sliding-window", "8"});
  ASSERT_FALSE(model.empty());
  std::vector<int> first;
  for (int i = 0; i < 40; ++i) first.push_back(200 + 7 * i % 300);
  std::vector<int> second(first.begin(), first.begin() + 32);
  for (int i = 0; i < 10; ++i) second.push_back(40 + i);
  // The first 18 tokens: a decode node that has the first block cached computes the last two itself (fewer than
  // --pd-min-tokens), its sliding layers reading positions 10-15 of that block.
  const std::vector<int> third(first.begin(), first.begin() + 18);
  const std::vector<std::vector<int>> prompts = {first, second, third};
  constexpr int kTokens = 40;
  std::vector<Greedy> whole;
  {
    std::vector<std::string> f = kCpu;
    f.push_back("--disable-hybrid-kv-cache-manager");
    Node single = start_node(model, f);
    for (const auto& p : prompts) whole.push_back(complete_logprobs(single.url, p, kTokens, "g4w"));
    EXPECT_EQ(single.proc->stop(SIGTERM), 0);
  }
  std::vector<std::string> p = {"--role", "prefill", "--max-batch-tokens", "16"};
  p.insert(p.end(), kCpu.begin(), kCpu.end());
  Node prefill = start_node(model, p);
  std::vector<std::string> d = {"--role",          "decode", "--prefill-nodes",  prefill.url,
                                "--pd-min-tokens", "4",      "--no-prefix-cache"};
  d.insert(d.end(), kCpu.begin(), kCpu.end());
  Node decode = start_node(model, d);
  auto check = [&](const Node& node, size_t i, const char* label) {
    const Greedy got = complete_logprobs(node.url, prompts[i], kTokens, "g4w");
    EXPECT_FALSE(got.text.empty());
    EXPECT_EQ(got.text, whole[i].text) << label << ", prompt " << i;
    EXPECT_LT(max_logprob_gap(got, whole[i]), kLogprobTolerance) << label << ", prompt " << i;
    EXPECT_GE(got.logprobs.size() + 1, whole[i].logprobs.size()) << label << ", prompt " << i;
  };
  const std::string kv_bytes = "tessera_pd_kv_bytes_total";
  check(decode, 0, "windowed decode node");
  const double bytes0 = testing::scrape_metric(decode.url, kv_bytes);
  check(decode, 1, "windowed decode node");
  const double bytes1 = testing::scrape_metric(decode.url, kv_bytes) - bytes0;
  // A decode node that keeps every position, with a prefix cache of its own: it asks for every row, so the prefill
  // node takes from its prefix cache only what its sliding layers still hold rows of (the second prompt is computed
  // there again). Given zeros, this node would cache them, and the third prompt, which finds the second's first
  // block here and computes its last two positions here, would read them in its window.
  std::vector<std::string> d2 = {
      "--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4", "--disable-hybrid-kv-cache-manager"};
  d2.insert(d2.end(), kCpu.begin(), kCpu.end());
  Node every = start_node(model, d2);
  check(every, 1, "decode node keeping every position");
  const double every_bytes = testing::scrape_metric(every.url, kv_bytes);
  check(every, 2, "decode node keeping every position");
  // What crossed (api::KvLayout version 3), worked out from the model description the nodes exchange: a full
  // layer carries every position, a sliding one only those from the window block the prompt's end falls in (16-token
  // blocks, a window of 8: position 32 for both prompts) on a windowed decode node, every one on the other node. f32
  // rows of each layer's own width (its sliding layers are narrower), K and V.
  auto info = http::fetch({.method = "GET", .url = decode.url + "/internal/pd/info"});
  ASSERT_TRUE(info.ok() && info->status == 200);
  const json model_desc = json::parse(info->body)["model"];
  const std::string desc = model_desc["kv_sliding"].get<std::string>();  // "0110... window=8"
  EXPECT_NE(desc.find(" window=8"), std::string::npos) << desc;
  const std::string sliding = desc.substr(0, desc.find(' '));
  const std::vector<int> widths = model_desc["kv_widths"].get<std::vector<int>>();
  ASSERT_EQ(widths.size(), sliding.size());
  double full = 0, windowed = 0;  // K and V bytes of one position over the full (sliding) layers
  for (size_t l = 0; l < widths.size(); ++l) (sliding[l] == '1' ? windowed : full) += 2.0 * 4.0 * widths[l];
  ASSERT_GT(full, 0);
  ASSERT_GT(windowed, 0);
  EXPECT_LT(*std::min_element(widths.begin(), widths.end()), model_desc["kv_dim"].get<int>())
      << "this shape's sliding layers are the narrower ones";
  std::printf(
      "KV bytes received: windowed decode node %.0f (40 positions) and %.0f (42); keeping every position %.0f\n",
      bytes0, bytes1, every_bytes);
  EXPECT_EQ(bytes0, 40 * full + (40 - 32) * windowed) << desc;
  EXPECT_EQ(bytes1, 42 * full + (42 - 32) * windowed) << desc;
  EXPECT_EQ(every_bytes, 42 * (full + windowed)) << desc;
  const std::string labels = "{model=\"g4w\"}";
  EXPECT_GT(testing::scrape_metric(every.url, "tessera_prefix_cache_hit_tokens_total" + labels), 0)
      << "the third prompt was to find the second's first block on the decode node";
  EXPECT_EQ(testing::scrape_metric(every.url, "tessera_kv_window_blocks_total" + labels), 0);
  EXPECT_EQ(every.proc->stop(SIGTERM), 0);
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 2.0);
  EXPECT_GT(testing::scrape_metric(prefill.url, "tessera_kv_window_blocks_total" + labels), 0);
  EXPECT_GT(testing::scrape_metric(decode.url, "tessera_kv_window_blocks_total" + labels), 0);
  EXPECT_GT(testing::scrape_metric(prefill.url, "tessera_prefix_cache_hit_tokens_total" + labels), 0)
      << "the second prompt was to find the first's tokens on the prefill node";
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_kv_window_blocks_used" + labels), 0);
  EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
  EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);
}

// Gemma 4 26B-A4B's pattern (test size, 12 layers): 128 -> 8 experts beside a dense MLP, full layers whose V is K.
TEST(HybridServe, Gemma4MoePrefillDecodeSplit) {
  const std::string model = synth_model("g4m.gguf", 12, "gemma4-26b-a4b", {"--decisive"});
  ASSERT_FALSE(model.empty());
  check_split(model, "g4m", /*hybrid=*/false);
}

}  // namespace
}  // namespace tessera
