// The cluster KV pool end to end (docs/kv.md, kv/pool/pool_connector.h): real `tessera ctrl` and `tessera serve`
// processes on loopback. A node whose small device cache evicts a long prompt publishes the blocks in its pool
// region; another node asked a prompt with the same prefix loads them over the link instead of computing them, and
// answers the greedy text of a node without any cache. A node killed before its peer fetches costs recomputation
// only, and its entries vanish with its lease; a corrupted slot is detected by checksum and never used.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "ctrl/store.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::complete_greedy;
using testing::scrape_metric;
using testing::start_tessera;
using testing::TesseraServer;

std::string pool_metric(const std::string& family) {
  return family + "{connector=\"pool\",model=\"stories260K\",tier=\"pool\"}";
}

std::vector<std::string> serve_args(std::vector<std::string> extra,
                                    const std::string& model = testing::stories260k_dir()) {
  std::vector<std::string> argv = {"serve", "--model",   model, "--port",          "0",  "--backend",
                                   "cpu",   "--threads", "1",   "--max-model-len", "256"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Waits until `metric` on `url` satisfies `pred` (up to `seconds`); returns the last value.
template <class Pred>
double wait_metric(const std::string& url, const std::string& metric, Pred pred, double seconds = 15) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  double v = scrape_metric(url, metric);
  while (!pred(v) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v = scrape_metric(url, metric);
  }
  return v;
}

class KvPool : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    ctrl_ = start_tessera({"ctrl", "--port", "0"});
    ASSERT_FALSE(ctrl_.url.empty());
  }
  // A node of the pool: `device` MiB of device cache, 1 MiB of pool memory, leases of `ttl_ms`; `model` (served
  // under stories260K's name, 4 MiB of pool memory) when given.
  TesseraServer pool_node(const std::string& device = "0.2", std::vector<std::string> env = {},
                          const std::string& ttl_ms = "1000", const std::string& model = "") {
    std::vector<std::string> args =
        serve_args({"--kv-memory", device, "--kv-pool-memory", "1", "--ctrl", ctrl_.url, "--ctrl-ttl-ms", ttl_ms});
    if (!model.empty()) args = with_model(args, model);
    if (!model.empty()) {
      // Room for the hybrid model's running states in the device cache, and for every prompt's blocks and states in
      // the pool (half of it is state slots).
      args[std::find(args.begin(), args.end(), "--kv-pool-memory") - args.begin() + 1] = "4";
      args.insert(args.end(), {"--max-num-seqs", "2"});
    }
    if (env.empty()) return start_tessera(args);
    // A test fault in the environment: the same command behind env(1).
    env.insert(env.begin(), "/usr/bin/env");
    env.push_back(testing::tessera_bin());
    env.insert(env.end(), args.begin(), args.end());
    TesseraServer s;
    s.p = std::make_unique<testing::BackgroundProcess>(env);
    const int port = testing::port_from_line(s.p->wait_for_line("listening on", 60));
    EXPECT_GT(port, 0);
    s.url = port > 0 ? "http://127.0.0.1:" + std::to_string(port) : "";
    return s;
  }
  // Serves `prompt` on `url`, then six other long prompts (~5 blocks each) that push its blocks out of a 20-block
  // device cache.
  static void serve_and_evict(const std::string& url, const std::string& prompt) {
    complete_greedy(url, prompt, 8);
    for (const std::string& other : kOthers) complete_greedy(url, other, 8);
    EXPECT_GT(scrape_metric(url, "tessera_prefix_cache_evictions_total{model=\"stories260K\"}"), 0.0);
  }
  // `args` serving `model` under stories260K's name (the metrics' label).
  static std::vector<std::string> with_model(std::vector<std::string> args, const std::string& model) {
    args[2] = model;
    args.insert(args.end(), {"--served-model-name", "stories260K"});
    return args;
  }
  // The keys a store holds under `prefix`.
  size_t ctrl_keys(const std::string& prefix) {
    auto store = ctrl::make_store("embedded", ctrl_.url);
    EXPECT_TRUE(store.ok());
    if (!store.ok()) return 0;
    auto kvs = (*store)->range(prefix);
    EXPECT_TRUE(kvs.ok());
    return kvs.ok() ? kvs->size() : 0;
  }

  inline static const std::string kPrompt =
      "Once upon a time, there was a little girl named Lily. She lived in a small house with her mom and dad. One "
      "day she went to the park with her mom. The sun was bright and the birds were singing.";
  inline static const std::string kOther =
      "The cat sat on the mat and looked at the bird. The bird was small and blue and very pretty. The bird was "
      "singing a happy song. The cat liked the song and closed its eyes.";
  inline static const std::vector<std::string> kOthers = {
      "Tom had a big red ball and he liked to play with it. He played with it every day after lunch. One day the " +
          std::string("ball went into the garden. The garden was full of flowers and tall grass."),
      "Tom looked for the ball everywhere. He looked under the bushes and behind the old shed. His friend Sue came " +
          std::string("to help. Together they found the ball next to a little pond."),
      "Then they saw a big dog near the tree. The dog was brown and had a long tail. The dog wanted to play with " +
          std::string("Lily. She threw a stick and the dog ran after it."),
      "Ben built a tall tower of blocks in his room. It was red and yellow and green. His little sister wanted to " +
          std::string("help him, so she brought more blocks from the box."),
      "The sun came up over the hill and the farm woke up. The cow said moo and the hen said cluck. The farmer " +
          std::string("went out to feed them all before breakfast."),
      "Mia found a shiny stone on the beach. She put it in her pocket and ran home to show her dad. He said it " +
          std::string("was a very special stone from the sea.")};
  static constexpr int kAnswer = 16;
  TesseraServer ctrl_;
};

TEST_F(KvPool, APrefixEvictedOnOneNodeIsLoadedFromItsPoolOnAnotherWithTheSameText) {
  TesseraServer plain = start_tessera(serve_args({"--no-prefix-cache"}));
  const std::string ask = kPrompt + " Lily saw a cat.";
  const std::string ask_other = kOther + " The bird flew away.";
  const std::string want = complete_greedy(plain.url, ask, kAnswer);
  const std::string want_other = complete_greedy(plain.url, ask_other, kAnswer);
  TesseraServer b = pool_node("4");

  // The control: a node outside the pool computed kOther and evicted it; B finds nothing in the pool.
  TesseraServer lone = start_tessera(serve_args({"--kv-memory", "0.2"}));
  serve_and_evict(lone.url, kOther);
  EXPECT_EQ(complete_greedy(b.url, ask_other, kAnswer), want_other);
  EXPECT_EQ(scrape_metric(b.url, pool_metric("tessera_kv_tier_hit_tokens_total")), 0.0) << "nothing in the pool";

  // A computes kPrompt and evicts it: its blocks go to A's pool slots and into the control plane.
  TesseraServer a = pool_node();
  serve_and_evict(a.url, kPrompt);
  EXPECT_GT(wait_metric(a.url, pool_metric("tessera_kv_tier_blocks"), [](double v) { return v > 0; }), 0.0)
      << "A published what it evicted";
  EXPECT_GT(wait_metric(b.url, pool_metric("tessera_kv_tier_peer_blocks"), [](double v) { return v > 0; }), 0.0)
      << "B's mirror of the index saw A's blocks";

  EXPECT_EQ(complete_greedy(b.url, ask, kAnswer), want) << "the greedy text of a node without any cache";
  const double hits = scrape_metric(b.url, pool_metric("tessera_kv_tier_hit_tokens_total"));
  EXPECT_GT(hits, 0.0) << "the prefix came from A's pool";
  EXPECT_GT(scrape_metric(b.url, pool_metric("tessera_kv_tier_load_bytes_total")), 0.0);
  EXPECT_EQ(scrape_metric(b.url, pool_metric("tessera_kv_tier_failed_blocks_total")), 0.0);
  const double rate = scrape_metric(
      b.url, "tessera_prefix_cache_tier_hit_rate{connector=\"pool\",model=\"stories260K\",tier=\"pool\"}");
  EXPECT_GT(rate, 0.0);
  std::printf("B: %.0f prompt tokens from the pool, pool hit rate %.3f, %.2f ms loading\n", hits, rate,
              1000 * scrape_metric(b.url, pool_metric("tessera_kv_tier_load_seconds_total")));
  EXPECT_EQ(a.p->stop(SIGTERM), 0);
  EXPECT_EQ(b.p->stop(SIGTERM), 0);
  EXPECT_EQ(lone.p->stop(SIGTERM), 0);
  EXPECT_EQ(plain.p->stop(SIGTERM), 0);
  EXPECT_EQ(ctrl_keys("/tessera/kvpool/"), 0u) << "a node that stops revokes its entries";
}

TEST_F(KvPool, ANodeKilledBeforeItsPeerFetchesCostsRecomputationAndItsEntriesLapse) {
  TesseraServer plain = start_tessera(serve_args({"--no-prefix-cache"}));
  const std::string ask = kPrompt + " Lily saw a cat.";
  const std::string want = complete_greedy(plain.url, ask, kAnswer);
  // A 3 s lease: B asks well before A's entries lapse.
  TesseraServer a = pool_node("0.2", {}, "3000");
  TesseraServer b = pool_node("4");
  serve_and_evict(a.url, kPrompt);
  ASSERT_GT(wait_metric(b.url, pool_metric("tessera_kv_tier_peer_blocks"), [](double v) { return v > 0; }), 0.0);
  EXPECT_GT(ctrl_keys("/tessera/kvpool/blocks/"), 0u);

  EXPECT_EQ(a.p->stop(SIGKILL), 128 + SIGKILL);
  // B still believes A holds the prefix (the lease has not lapsed yet): the fetch fails, the prompt is computed.
  EXPECT_EQ(complete_greedy(b.url, ask, kAnswer), want) << "recomputed: the same text";
  EXPECT_EQ(scrape_metric(b.url, pool_metric("tessera_kv_tier_hit_tokens_total")), 0.0);
  EXPECT_EQ(scrape_metric(b.url, "tessera_kv_load_shortfalls_total{model=\"stories260K\"}"), 1.0);

  // A's lease lapses: its entries leave the control plane and B's mirror.
  EXPECT_EQ(wait_metric(b.url, pool_metric("tessera_kv_tier_peer_blocks"), [](double v) { return v == 0; }), 0.0);
  EXPECT_EQ(ctrl_keys("/tessera/kvpool/agents/"), 1u) << "only B's agent is left";
  EXPECT_EQ(complete_greedy(b.url, kPrompt + " Lily saw a dog.", kAnswer),
            complete_greedy(plain.url, kPrompt + " Lily saw a dog.", kAnswer));
  EXPECT_EQ(b.p->stop(SIGTERM), 0) << "B never crashed";
  EXPECT_EQ(plain.p->stop(SIGTERM), 0);
}

TEST_F(KvPool, ACorruptedSlotIsDetectedAndRecomputedNeverUsed) {
  TesseraServer plain = start_tessera(serve_args({"--no-prefix-cache"}));
  const std::string ask = kPrompt + " Lily saw a cat.";
  const std::string want = complete_greedy(plain.url, ask, kAnswer);
  // A flips one payload byte of every record it publishes, after taking its checksum.
  TesseraServer a = pool_node("0.2", {"TESSERA_KV_POOL_CORRUPT=1"});
  TesseraServer b = pool_node("4");
  serve_and_evict(a.url, kPrompt);
  ASSERT_GT(wait_metric(b.url, pool_metric("tessera_kv_tier_peer_blocks"), [](double v) { return v > 0; }), 0.0);
  EXPECT_EQ(complete_greedy(b.url, ask, kAnswer), want) << "the corrupted blocks were not used";
  EXPECT_GE(scrape_metric(b.url, pool_metric("tessera_kv_tier_failed_blocks_total")), 1.0) << "detected";
  EXPECT_EQ(scrape_metric(b.url, pool_metric("tessera_kv_tier_hit_tokens_total")), 0.0);
  EXPECT_EQ(scrape_metric(b.url, "tessera_kv_load_shortfalls_total{model=\"stories260K\"}"), 1.0);
  EXPECT_EQ(a.p->stop(SIGTERM), 0);
  EXPECT_EQ(b.p->stop(SIGTERM), 0);
  EXPECT_EQ(plain.p->stop(SIGTERM), 0);
}

// A hybrid model (Qwen3.5's pattern at test size: linear-attention and full-attention layers in turn): A evicts a
// prompt's blocks with the state checkpoint after its last block boundary; they go into A's block and state slots,
// and B takes the prefix and that recurrent state over the link, answering the greedy text of a node without any
// cache.
TEST_F(KvPool, AHybridModelsPrefixComesFromAnotherNodeWithTheStateAfterIt) {
  const std::string model =
      testing::synth_small_gguf(testing::scratch_dir() + "/q35.gguf", "qwen3.5-0.8b", 4, {"--decisive"});
  ASSERT_FALSE(model.empty());
  TesseraServer plain = start_tessera(with_model(serve_args({"--no-prefix-cache"}), model));
  const std::string ask = kPrompt + " Lily saw a cat.";
  const std::string want = complete_greedy(plain.url, ask, kAnswer);
  TesseraServer a = pool_node("0.5", {}, "1000", model);
  TesseraServer b = pool_node("4", {}, "1000", model);
  serve_and_evict(a.url, kPrompt);
  EXPECT_GT(wait_metric(a.url, pool_metric("tessera_kv_tier_blocks"), [](double v) { return v > 0; }), 0.0)
      << "A published what it evicted";
  EXPECT_GT(wait_metric(b.url, pool_metric("tessera_kv_tier_peer_blocks"), [](double v) { return v > 0; }), 0.0);

  EXPECT_EQ(complete_greedy(b.url, ask, kAnswer), want) << "the greedy text of a node without any cache";
  const double hits = scrape_metric(b.url, pool_metric("tessera_kv_tier_hit_tokens_total"));
  EXPECT_GT(hits, 0.0) << "the prefix and its state came from A's pool";
  EXPECT_EQ(scrape_metric(b.url, pool_metric("tessera_kv_tier_failed_blocks_total")), 0.0);
  EXPECT_EQ(scrape_metric(b.url, "tessera_kv_load_shortfalls_total{model=\"stories260K\"}"), 0.0);
  std::printf("qwen3.5 pattern: B took %.0f prompt tokens and their state from the pool\n", hits);
  EXPECT_EQ(a.p->stop(SIGTERM), 0);
  EXPECT_EQ(b.p->stop(SIGTERM), 0);
  EXPECT_EQ(plain.p->stop(SIGTERM), 0);
}

TEST_F(KvPool, APoolWithoutAControlPlaneIsRefused) {
  auto r = testing::run_process([] {
    std::vector<std::string> argv = serve_args({"--kv-pool-memory", "1"});
    argv.insert(argv.begin(), testing::tessera_bin());
    return argv;
  }());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv-pool-memory needs --ctrl"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
