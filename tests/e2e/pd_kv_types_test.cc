// KV cache types across prefill/decode disaggregation, with real processes: a prefill node and a decode node whose
// KV caches hold unlike types (f16 and q8_0, either way round, and q8_0 on both). The KV crosses the link as f32
// rows; the decode node converts them into its own cache type (quantising to q8_0 on the way in). The model is a
// seeded random GGUF of a grouped-query family at head_dim 32 (`tessera synth`), since a q8_0 cache needs whole
// 32-value blocks per kv head (stories260K's head_dim is 8, which q8_0 refuses).
//
// What must hold, per prompt (greedy, 32 tokens, through the decode node):
//   - q8_0 -> q8_0 gives the text of a single q8_0 node exactly: the prompt's KV is computed the same way (a q8_0
//     cache on the same cpu kernels), and a q8_0 block widened to f32 and quantised again is the same block (its
//     largest element maps back to +-127 with the same f16 scale), so the decode node's cache holds the bytes the
//     single node's does;
//   - f16 -> q8_0 gives the text of a single q8_0 node, and q8_0 -> f16 the text of a single f16 node, on at least
//     all but one of the prompts: there the prompt was computed over another cache type than the single node's
//     (attention of the prompt's later layers read f16 rows on one, q8_0 rows on the other), so their K and V differ
//     by that rounding; the test prints where a text parts.
//   - every request went through the link (tessera_pd_requests_total{path="remote"}).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::BackgroundProcess;
using testing::complete_greedy;
using testing::scrape_metric;
using testing::tessera_bin;

struct Node {
  std::unique_ptr<BackgroundProcess> proc;
  std::string url;
};

Node start_node(const std::string& model, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      tessera_bin(),         "serve",       "--model",     model, "--port", "0", "--backend", "cpu", "--threads", "1",
      "--served-model-name", "stories260K", "--kv-memory", "64"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Node n;
  n.proc = std::make_unique<BackgroundProcess>(argv);
  const int port = testing::port_from_line(n.proc->wait_for_line("listening on", 120.0));
  EXPECT_GT(port, 0);
  n.url = "http://127.0.0.1:" + std::to_string(port);
  return n;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl named Lily who loved to play",
    "The cat sat on the mat and looked at the big dog in the garden",
    "A long time ago in a small town by the sea there lived an old man",
    "Tom and his friend went to the park to fly a kite and eat ice cream",
};
constexpr int kTokens = 32;

class PdKvTypes : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::scratch_dir() + "/kv-types.gguf";
    auto w = testing::run_process(
        {tessera_bin(), "synth",    "--shape", "llama3.2-1b", "--small", "--dim",   "256", "--hidden-dim",
         "512",         "--layers", "2",       "--format",    "gguf",    "--dtype", "f32", "--rare-byte-tokens",
         "--decisive",  "--seed",   "7",       "--out",       model_},
        300.0);
    ASSERT_EQ(w.exit_code, 0) << w.err;
  }
  std::vector<std::string> single(const std::string& type) {
    Node n = start_node(model_, {"--cache-type-k", type, "--cache-type-v", type});
    std::vector<std::string> out;
    for (const std::string& p : kPrompts) out.push_back(complete_greedy(n.url, p, kTokens));
    EXPECT_EQ(n.proc->stop(SIGTERM), 0);
    return out;
  }
  std::vector<std::string> pair(const std::string& prefill_type, const std::string& decode_type) {
    Node prefill = start_node(model_, {"--role", "prefill", "--kv-dtype", prefill_type});
    Node decode = start_node(model_, {"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4",
                                      "-ctk", decode_type, "-ctv", decode_type});
    std::vector<std::string> out;
    for (const std::string& p : kPrompts) out.push_back(complete_greedy(decode.url, p, kTokens));
    EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"),
              static_cast<double>(kPrompts.size()));
    EXPECT_EQ(decode.proc->stop(SIGTERM), 0);
    EXPECT_EQ(prefill.proc->stop(SIGTERM), 0);
    return out;
  }
  std::string model_;
};

int same(const std::vector<std::string>& got, const std::vector<std::string>& want, const std::string& label) {
  int n = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] == want[i]) {
      ++n;
      continue;
    }
    size_t at = 0;
    while (at < got[i].size() && at < want[i].size() && got[i][at] == want[i][at]) ++at;
    std::printf("%s, prompt %zu: parts at byte %zu of %zu\n  pd:     %s\n  single: %s\n", label.c_str(), i, at,
                want[i].size(), got[i].c_str(), want[i].c_str());
  }
  std::printf("%s: %d of %zu texts identical\n", label.c_str(), n, want.size());
  return n;
}

TEST_F(PdKvTypes, UnlikeKvCacheTypesOnEitherSideGiveSingleNodeText) {
  const std::vector<std::string> q8 = single("q8_0"), f16 = single("f16");
  for (const std::string& t : q8) EXPECT_FALSE(t.empty());
  // Nothing below would mean much if q8_0 and f16 could not be told apart on this model at all... they can agree
  // on every prompt, which is fine: the q8_0 -> q8_0 case is the exact one.
  same(q8, f16, "single q8_0 vs single f16");
  EXPECT_EQ(same(pair("q8_0", "q8_0"), q8, "q8_0 -> q8_0 vs single q8_0"), static_cast<int>(kPrompts.size()));
  EXPECT_GE(same(pair("f16", "q8_0"), q8, "f16 -> q8_0 vs single q8_0"), static_cast<int>(kPrompts.size()) - 1);
  EXPECT_GE(same(pair("q8_0", "f16"), f16, "q8_0 -> f16 vs single f16"), static_cast<int>(kPrompts.size()) - 1);
}

TEST_F(PdKvTypes, AQuantisedCacheTheModelCannotHoldIsRefusedByName) {
  // stories260K's head_dim is 8: not a whole q8_0 block.
  TS_REQUIRE_STORIES260K();
  auto r = testing::run_process({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0",
                                 "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"},
                                60.0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("q8_0 KV cache"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("head_dim is 8"), std::string::npos) << r.err;
  // K and V of unlike types are refused, naming both.
  r = testing::run_process({tessera_bin(), "serve", "--model", model_, "--port", "0", "-ctk", "q8_0", "-ctv", "f16"},
                           60.0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("K cache type q8_0 and V cache type f16 differ"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
