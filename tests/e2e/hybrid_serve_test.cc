// `tessera serve` with a hybrid model (Qwen3.5's shape at test size): concurrent requests under a KV budget that
// forces preemption give each prompt the text it gets alone (a preempted sequence frees its recurrent-state slot and
// starts again from a fresh state), n = 3 greedy choices equal one choice, every slot is free afterwards, and
// /metrics states that prefix reuse is off for the model.
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

std::vector<std::string> complete(const std::string& url, const std::vector<int>& prompt, int n, int tokens) {
  auto r = http::fetch(
      {.method = "POST",
       .url = url + "/v1/completions",
       .headers = {{"Content-Type", "application/json"}},
       .body = json{{"model", "h"}, {"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0}, {"n", n}}.dump()});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body, nullptr, false);
  std::vector<std::string> out;
  if (body.is_object() && body.contains("choices"))
    for (const json& c : body["choices"]) out.push_back(c["text"].get<std::string>());
  return out;
}

TEST(HybridServe, PreemptedAndForkedSequencesKeepTheirTextAndFreeTheirState) {
  const std::string model = testing::scratch_dir() + "/h.gguf";
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
                                     "2",
                                     "--rare-byte-tokens",
                                     "--format",
                                     "gguf",
                                     "--dtype",
                                     "f32",
                                     "--seed",
                                     "7",
                                     "--out",
                                     model});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
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

}  // namespace
}  // namespace tessera
