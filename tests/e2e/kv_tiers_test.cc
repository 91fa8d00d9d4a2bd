// KV tiers end to end (docs/kv.md): a node whose device cache holds a fraction of a multi-turn conversation keeps
// what it evicts in host memory, then on disk, and serves later turns from there; every answer is the greedy text of
// a node that caches nothing. The disk tier outlives the process; a corrupted file on it is detected and recomputed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundProcess;
using testing::complete_greedy;
using testing::scrape_metric;
using testing::tessera_bin;

struct Node {
  std::unique_ptr<BackgroundProcess> proc;
  std::string url;
};

Node start_node(std::vector<std::string> extra, const std::string& model = testing::stories260k_dir(),
                const std::string& max_len = "256") {
  std::vector<std::string> argv = {tessera_bin(), "serve", "--model",   model, "--port",          "0",
                                   "--backend",   "cpu",   "--threads", "1",   "--max-model-len", max_len};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Node n;
  n.proc = std::make_unique<BackgroundProcess>(argv);
  const int port = testing::port_from_line(n.proc->wait_for_line("listening on"));
  EXPECT_GT(port, 0);
  n.url = "http://127.0.0.1:" + std::to_string(port);
  return n;
}

std::string tier_metric(const std::string& family, const std::string& tier, const std::string& model = "stories260K") {
  return family + "{connector=\"host\",model=\"" + model + "\",tier=\"" + tier + "\"}";
}

class KvTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    dir_ = fs::temp_directory_path() / ("tessera-kv-e2e-" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Three users, four turns each, interleaved: each turn sends the whole history (the user's lines and the
  // model's answers so far) and appends the answer. Returns every answer, in order.
  static std::vector<std::string> converse(const std::string& url) {
    std::vector<std::string> history(kLines.size()), answers;
    for (size_t turn = 0; turn < 4; ++turn) {
      for (size_t u = 0; u < kLines.size(); ++u) {
        history[u] += kLines[u][turn];
        const std::string answer = complete_greedy(url, history[u], kAnswerTokens);
        answers.push_back(answer);
        history[u] += answer;
      }
    }
    return answers;
  }
  inline static const std::vector<std::vector<std::string>> kLines = {
      {"Once upon a time, there was a little girl named Lily. She lived in a small house with her mom and dad.",
       " One day she went to the park with her mom. The sun was bright and the birds were singing.",
       " Then they saw a big dog near the tree. The dog was brown and had a long tail.",
       " The dog wanted to play with Lily. She threw a stick and the dog ran after it."},
      {"Tom had a big red ball and he liked to play with it. He played with it every day after lunch.",
       " One day the ball went into the garden. The garden was full of flowers and tall grass.",
       " Tom looked for it everywhere. He looked under the bushes and behind the old shed.",
       " His friend Sue came to help. Together they found the ball next to a little pond."},
      {"The cat sat on the mat and looked at the bird. The bird was small and blue and very pretty.",
       " The bird was singing a happy song. The cat liked the song and closed its eyes.",
       " The cat wanted to be friends with the bird. It walked slowly to the window.",
       " So the cat said hello. The bird was surprised, but then it said hello too."}};
  static constexpr int kAnswerTokens = 24;
  // A family's shape at test size, `layers` layers (testing::synth_small_gguf), beside the test's directory.
  std::string synth_small(const std::string& shape, int layers, const std::string& tag) const {
    return testing::synth_small_gguf(
        (dir_.parent_path() / ("tessera-kv-e2e-" + tag + "-" + std::to_string(getpid()) + ".gguf")).string(), shape,
        layers, {"--decisive"});
  }
  fs::path dir_;
};

TEST_F(KvTiers, AConversationOutgrowingDeviceMemoryIsServedFromHostAndDiskWithTheSameText) {
  // The reference: no cache of any kind.
  Node plain = start_node({"--no-prefix-cache"});
  const std::vector<std::string> want = converse(plain.url);
  EXPECT_EQ(plain.proc->stop(SIGTERM), 0);

  // 20 device blocks of 16 tokens (320 positions) for three histories of up to ~250 tokens each; 10 blocks of host
  // memory; the rest on disk.
  const std::vector<std::string> tiers = {"--kv-memory",   "0.2",         "--kv-host-memory", "0.1",
                                          "--kv-disk-dir", dir_.string(), "--kv-disk-size",   "64"};
  Node tiered = start_node(tiers);
  EXPECT_EQ(converse(tiered.url), want) << "every answer is the greedy text of a node without any cache";
  EXPECT_GT(scrape_metric(tiered.url, "tessera_prefix_cache_evictions_total{model=\"stories260K\"}"), 0.0)
      << "the device cache overflowed";
  const double host_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "host"));
  const double disk_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk"));
  EXPECT_GT(host_hits, 0.0);
  EXPECT_GT(disk_hits, 0.0);
  EXPECT_GT(scrape_metric(tiered.url, tier_metric("tessera_kv_tier_save_bytes_total", "disk")), 0.0);
  EXPECT_EQ(scrape_metric(tiered.url, tier_metric("tessera_kv_tier_failed_blocks_total", "disk")), 0.0);
  const double device_rate = scrape_metric(
      tiered.url, "tessera_prefix_cache_tier_hit_rate{connector=\"engine\",model=\"stories260K\",tier=\"device\"}");
  const double rate = scrape_metric(tiered.url, "tessera_prefix_cache_hit_rate{model=\"stories260K\"}");
  EXPECT_GT(rate, device_rate) << "the hit rate counts the host and disk tiers";
  std::printf("device hit rate %.3f, all tiers %.3f; host %.0f, disk %.0f tokens\n", device_rate, rate, host_hits,
              disk_hits);
  EXPECT_EQ(tiered.proc->stop(SIGTERM), 0);

  // A restarted node finds the first user's history of its second turn on disk.
  Node again = start_node(tiers);
  const std::string second_turn = kLines[0][0] + want[0] + kLines[0][1];
  EXPECT_EQ(complete_greedy(again.url, second_turn, kAnswerTokens), want[kLines.size()]);
  EXPECT_GT(scrape_metric(again.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk")), 0.0)
      << "the disk tier survived the restart";
  EXPECT_EQ(again.proc->stop(SIGTERM), 0);

  // Every file on disk corrupted (one byte flipped mid-file): a restarted node detects it, recomputes, and answers
  // the same text; nothing from the disk is used.
  int corrupted = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir_)) {
    if (e.path().extension() != ".kvb") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(e.path()) / 2);
    char c = 0;
    f.seekg(middle);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(middle);
    f.write(&c, 1);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0);
  Node bad = start_node(tiers);
  EXPECT_EQ(complete_greedy(bad.url, second_turn, kAnswerTokens), want[kLines.size()]);
  EXPECT_GE(scrape_metric(bad.url, tier_metric("tessera_kv_tier_failed_blocks_total", "disk")), 1.0)
      << "the corrupted record was detected";
  EXPECT_EQ(scrape_metric(bad.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk")), 0.0) << "and not used";
  EXPECT_EQ(scrape_metric(bad.url, "tessera_kv_load_shortfalls_total{model=\"stories260K\"}"), 1.0)
      << "its positions were computed instead";
  EXPECT_EQ(bad.proc->stop(SIGTERM), 0);
}

// Gemma 4 E2B's pattern (test size, 10 layers, half of them reading earlier layers' K/V): its sliding layers' rows
// are narrower than its full layers', and every tier holds them padded to the widest (engine/internal/kv_parts.h).
// Evicted to host memory and disk and read back, they give the greedy text of a node without any cache.
TEST_F(KvTiers, Gemma4sUnlikeLayerWidthsGoThroughTheTiersUnchanged) {
  const std::string model = synth_small("gemma4-e2b", 10, "g4");
  ASSERT_FALSE(model.empty());
  const std::string name = "stories260K";  // served under this name: the conversation helper asks for it
  Node plain = start_node({"--no-prefix-cache", "--served-model-name", name}, model, "512");
  const std::vector<std::string> want = converse(plain.url);
  EXPECT_EQ(plain.proc->stop(SIGTERM), 0);
  // Its byte-level vocabulary makes the histories up to about 450 tokens; at 3 KB of f16 K/V a position, 2 MiB holds
  // 42 blocks of 16: one history at full context, not all three.
  Node tiered = start_node({"--kv-memory", "2", "--kv-host-memory", "0.1", "--kv-disk-dir", dir_.string(),
                            "--kv-disk-size", "64", "--served-model-name", name},
                           model, "512");
  EXPECT_EQ(converse(tiered.url), want) << "every answer is the greedy text of a node without any cache";
  const double host_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "host", name));
  const double disk_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk", name));
  EXPECT_GT(host_hits + disk_hits, 0.0) << "blocks came back from the tiers";
  std::printf("gemma4: host %.0f, disk %.0f tokens\n", host_hits, disk_hits);
  EXPECT_EQ(tiered.proc->stop(SIGTERM), 0);
  fs::remove(model);
}

// A hybrid model (Qwen3.5's pattern at test size: linear-attention and full-attention layers in turn): a block after
// which the node kept a state checkpoint leaves for host memory and disk with that recurrent state, and a later turn
// goes on from it; every answer is the greedy text of a node without any cache, and a restarted node finds the state
// on disk.
TEST_F(KvTiers, AHybridModelsStateGoesThroughTheTiersWithItsBlocks) {
  const std::string model = synth_small("qwen3.5-0.8b", 4, "q35");
  ASSERT_FALSE(model.empty());
  const std::string name = "stories260K";  // served under this name: the conversation helper asks for it
  Node plain = start_node({"--no-prefix-cache", "--served-model-name", name}, model, "512");
  const std::vector<std::string> want = converse(plain.url);
  EXPECT_EQ(plain.proc->stop(SIGTERM), 0);
  // 35 blocks of 16 for three histories of up to about 450 tokens each (a byte-level vocabulary).
  const std::vector<std::string> tiers = {"--kv-memory",         "2",           "--kv-host-memory", "0.1",
                                          "--kv-disk-dir",       dir_.string(), "--kv-disk-size",   "64",
                                          "--served-model-name", name};
  Node tiered = start_node(tiers, model, "512");
  EXPECT_EQ(converse(tiered.url), want) << "every answer is the greedy text of a node without any cache";
  EXPECT_GT(scrape_metric(tiered.url, "tessera_state_checkpoints_total{model=\"" + name + "\"}"), 0.0)
      << "prefix reuse is on with the tiers";
  const double host_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "host", name));
  const double disk_hits = scrape_metric(tiered.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk", name));
  EXPECT_GT(host_hits + disk_hits, 0.0) << "blocks and their state came back from the tiers";
  std::printf("qwen3.5 pattern: host %.0f, disk %.0f tokens\n", host_hits, disk_hits);
  EXPECT_EQ(tiered.proc->stop(SIGTERM), 0);

  Node again = start_node(tiers, model, "512");
  const std::string second_turn = kLines[0][0] + want[0] + kLines[0][1];
  EXPECT_EQ(complete_greedy(again.url, second_turn, kAnswerTokens), want[kLines.size()]);
  EXPECT_GT(scrape_metric(again.url, tier_metric("tessera_kv_tier_hit_tokens_total", "disk", name)), 0.0)
      << "the first turn's blocks and the state after them survived the restart";
  EXPECT_EQ(again.proc->stop(SIGTERM), 0);
  fs::remove(model);
}

// The tiers and prefill/decode together: a decode node whose device cache lost a prompt's prefix finds it in host
// memory and asks its prefill node only for the rest (the host connector is consulted before pd-link), with the
// greedy text of a node that caches nothing.
TEST_F(KvTiers, ADecodeNodeAsksItsPrefillNodeOnlyForWhatItsTiersLack) {
  Node plain = start_node({"--no-prefix-cache"});
  Node prefill = start_node({"--role", "prefill"});
  Node decode = start_node({"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4", "--kv-memory",
                            "0.2", "--kv-host-memory", "1"});
  const std::string prefix =
      "Once upon a time, there was a little girl named Lily. She lived in a small house with her mom and dad.";
  auto ask = [&](const std::string& prompt) {
    EXPECT_EQ(complete_greedy(decode.url, prompt, 8), complete_greedy(plain.url, prompt, 8)) << prompt;
  };
  auto sent = [&] { return scrape_metric(decode.url, "tessera_pd_kv_bytes_total"); };
  ask(prefix + " One day she went to the park.");
  const double first = sent();
  EXPECT_GT(first, 0.0) << "prefilled on the prefill node";
  // Other long prompts push the prefix's blocks out of the decode node's 20-block device cache.
  for (int i = 0; i < 8; ++i) {
    ask("Story " + std::to_string(i) +
        ": Tom had a big red ball and he liked to play with it in the garden "
        "every day after lunch with his friend Sue.");
  }
  EXPECT_GT(scrape_metric(decode.url, "tessera_prefix_cache_evictions_total{model=\"stories260K\"}"), 0.0);
  const double host_before = scrape_metric(decode.url, tier_metric("tessera_kv_tier_hit_tokens_total", "host"));
  const double before = sent();
  ask(prefix + " One day she went to the park.");
  const double again = sent() - before;
  EXPECT_GT(scrape_metric(decode.url, tier_metric("tessera_kv_tier_hit_tokens_total", "host")), host_before)
      << "the prefix came from host memory";
  EXPECT_GT(again, 0.0) << "the rest came from the prefill node";
  EXPECT_LT(again, first) << "the blocks host memory held were not sent again";
  EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"fallback\"}"), 0.0);
  EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
  EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);
  EXPECT_EQ(plain.proc->stop(SIGTERM), 0);
}

// Tier flags that cannot work are refused at start with a message naming the problem, never a crash or a node
// that silently keeps nothing.
TEST_F(KvTiers, BadTierFlagsAreRefusedWithAMessage) {
  fs::create_directories(dir_);
  const std::string file = (dir_ / "a-file").string();
  { std::ofstream(file) << "not a directory"; }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kv-disk-dir", dir_.string()}, "--kv-disk-size"},
      {{"--kv-disk-size", "64"}, "--kv-disk-dir"},
      {{"--kv-host-memory", "-1"}, "kv-host-memory"},
      {{"--kv-disk-dir", file + "/below", "--kv-disk-size", "64"}, "cannot create the KV disk tier directory"}};
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> argv = {tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const testing::ProcessResult r = testing::run_process(argv, 60.0);
    EXPECT_FALSE(r.timed_out) << flags[0];
    EXPECT_NE(r.exit_code, 0) << flags[0];
    EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
  }
}

}  // namespace
}  // namespace tessera
