// `tessera serve` with a hybrid model (Qwen3.5's shape at test size): concurrent requests under a KV budget that
// forces preemption give each prompt the text it gets alone (a preempted sequence frees its recurrent-state slot and
// starts again from a fresh state), n = 3 greedy choices equal one choice, every slot is free afterwards, and
// /metrics states that prefix reuse is off for the model. Split over a prefill and a decode node, the recurrent
// state travels with the full layers' KV (the wire layout's state section) and the text is the single node's.
#include <gtest/gtest.h>

#include <csignal>
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

// Qwen3.5's shape at test size, `layers` layers (full attention every other one: linear, full, linear, ...).
std::string synth_model(const std::string& name, int layers) {
  const std::string model = testing::scratch_dir() + "/" + name;
  auto synth = testing::run_process({testing::tessera_bin(),
                                     "synth",
                                     "--shape",
                                     "qwen3.5-0.8b",
                                     "--small",
                                     "--dim",
                                     "256",
                                     "--hidden-dim",
                                     "512",
                                     "--layers",
                                     std::to_string(layers),
                                     "--rare-byte-tokens",
                                     "--format",
                                     "gguf",
                                     "--dtype",
                                     "f32",
                                     "--seed",
                                     "7",
                                     "--out",
                                     model});
  EXPECT_EQ(synth.exit_code, 0) << synth.err;
  return synth.exit_code == 0 ? model : "";
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
  EXPECT_EQ(testing::scrape_metric(url, "tessera_prefix_cache_enabled" + labels), 0);
  EXPECT_EQ(testing::scrape_metric(url, "tessera_recurrent_state_slots_total" + labels), 4);

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

// Prefill on one node, decode on another: the decode node continues from the prefill node's full-layer KV and
// recurrent state (wire layout v2's state section), so its greedy text is the single node's token for token. Three
// layers (linear, full, linear): the state read after the last layer, not with the last full layer's KV. A prompt
// computed from a zero state would give other text. opencl has no linear-attention kernels: it refuses the model.
TEST(HybridServe, PrefillDecodeSplitCarriesTheRecurrentState) {
  const std::string model = synth_model("h3.gguf", 3);
  ASSERT_FALSE(model.empty());
  const std::vector<std::string> cpu = {"--backend", "cpu", "--threads", "1", "--kv-dtype", "f32"};
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back({1, 300 + i, 17, 42, 99, 7 + i, 250, 3, 64 + i, 11, 500 - i, 9});
  constexpr int kTokens = 48;
  std::vector<std::string> alone;
  {
    Node single = start_node(model, cpu);
    for (const auto& p : prompts) alone.push_back(complete(single.url, p, 1, kTokens, "h3").at(0));
    EXPECT_EQ(single.proc->stop(SIGTERM), 0);
  }
  std::vector<std::string> p = {"--role", "prefill"};
  p.insert(p.end(), cpu.begin(), cpu.end());
  Node prefill = start_node(model, p);
  std::vector<std::string> d = {"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4"};
  d.insert(d.end(), cpu.begin(), cpu.end());
  Node decode = start_node(model, d);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<std::string> got = complete(decode.url, prompts[i], 1, kTokens, "h3");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], alone[i]) << "prompt " << i;
  }
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 3.0);
  EXPECT_GT(testing::scrape_metric(decode.url, "tessera_pd_kv_bytes_total"), 0.0);
  // Two choices: the first continues from the carried state, the second computes its prompt again in a slot of
  // its own (a hybrid model's state is not forked); both are the single node's greedy text.
  const std::vector<std::string> two = complete(decode.url, prompts[1], 2, kTokens, "h3");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], alone[1]);
  EXPECT_EQ(two[1], alone[1]);
  const std::string labels = "{model=\"h3\"}";
  EXPECT_EQ(testing::scrape_metric(decode.url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(testing::scrape_metric(prefill.url, "tessera_recurrent_state_slots_used" + labels), 0);
  EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
  EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);

  // opencl (cpu -> opencl, opencl -> cpu) refuses the model by name, before serving anything.
  auto ocl = testing::run_process(
      {testing::tessera_bin(), "generate", "--model", model, "--backend", "opencl", "--max-tokens", "1", "--quiet"});
  EXPECT_NE(ocl.exit_code, 0);
  if (ocl.err.find("gated_delta_rule") == std::string::npos)
    std::printf("opencl refused before looking at the model (no device?): %s\n", ocl.err.c_str());
}

}  // namespace
}  // namespace tessera
