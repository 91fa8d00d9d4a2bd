// The cluster spec `tessera up` reads: one model or several behind one router, each node's model, the serve flags
// each node gets, and every malformed spec refused with the file and key named.
#include "solver/cluster_spec.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace tessera::solver {
namespace {

namespace fs = std::filesystem;

class ClusterSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-spec-" + std::to_string(getpid()));
    fs::create_directories(dir_ / "models" / "a");
    fs::create_directories(dir_ / "models" / "b");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& text) {
    const fs::path p = dir_ / "spec.yaml";
    std::ofstream(p) << text;
    return p.string();
  }
  Result<ClusterSpec> read(const std::string& text) { return read_cluster_spec(write(text), "/default/model"); }
  fs::path dir_;
};

bool has_pair(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag && args[i + 1] == value) return true;
  }
  return false;
}

TEST_F(ClusterSpecTest, OneModelIsServedUnderItsFolderName) {
  auto s = read("model: models/a\nchat_template: chatml\nnodes:\n  - {name: n0, role: both, threads: 2}\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->models.size(), 1u);
  EXPECT_EQ(s->models[0].name, "a");
  EXPECT_EQ(s->models[0].path, (dir_ / "models" / "a").string()) << "relative to the spec's folder";
  EXPECT_EQ(s->nodes[0].model, "a");
  const auto args = serve_args(*s, s->nodes[0]);
  EXPECT_EQ(args.front(), "serve");
  EXPECT_TRUE(has_pair(args, "--model", (dir_ / "models" / "a").string()));
  EXPECT_TRUE(has_pair(args, "--served-model-name", "a"));
  EXPECT_TRUE(has_pair(args, "--chat-template", "chatml"));
  EXPECT_TRUE(has_pair(args, "--threads", "2"));
  EXPECT_TRUE(has_pair(args, "--role", "both"));
  // No model key: the default one.
  auto d = read("nodes:\n  - {name: n0}\n");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->models[0].path, "/default/model");
  EXPECT_EQ(d->models[0].name, "model");
}

TEST_F(ClusterSpecTest, SeveralModelsEachNodeServesItsOwn) {
  auto s = read(
      "models:\n"
      "  - {name: alpha, path: models/a, args: [--max-num-seqs, '4']}\n"
      "  - {name: beta, path: models/b, chat_template: gemma}\n"
      "router: {port: 0, strategy: kv_aware}\n"
      "nodes:\n"
      "  - {name: p-a, role: prefill, model: alpha}\n"
      "  - {name: d-a, role: decode, model: alpha, args: [--pd-min-tokens, '2']}\n"
      "  - {name: b0, model: beta}\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->models.size(), 2u);
  EXPECT_EQ(s->router_port, 0);
  EXPECT_EQ(s->strategy, "kv_aware");
  const auto da = serve_args(*s, s->nodes[1]);
  EXPECT_TRUE(has_pair(da, "--served-model-name", "alpha"));
  EXPECT_TRUE(has_pair(da, "--max-num-seqs", "4")) << "the model's flags";
  EXPECT_TRUE(has_pair(da, "--pd-min-tokens", "2")) << "the node's own flags";
  const auto b0 = serve_args(*s, s->nodes[2]);
  EXPECT_TRUE(has_pair(b0, "--served-model-name", "beta"));
  EXPECT_TRUE(has_pair(b0, "--model", (dir_ / "models" / "b").string()));
  EXPECT_TRUE(has_pair(b0, "--chat-template", "gemma"));
  EXPECT_FALSE(has_pair(b0, "--max-num-seqs", "4")) << "alpha's flags stay alpha's";
}

// A model named ORG/NAME is looked up in the local Hugging Face cache and kept as written (the node resolves it the
// same way); one missing from the cache is refused, saying where the spec asked for it.
TEST_F(ClusterSpecTest, HuggingFaceReferencesFromTheLocalCache) {
  const fs::path repo = dir_ / "hub" / "models--Qwen--Qwen3-0.6B";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "aaaaaaaa11111111");
  std::ofstream(repo / "refs" / "main") << "aaaaaaaa11111111\n";
  setenv("HF_HUB_CACHE", (dir_ / "hub").c_str(), 1);
  auto s = read("model: Qwen/Qwen3-0.6B\nnodes:\n  - {name: n}\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->models[0].path, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(s->models[0].name, "Qwen/Qwen3-0.6B");
  EXPECT_TRUE(has_pair(serve_args(*s, s->nodes[0]), "--model", "Qwen/Qwen3-0.6B"));
  auto missing = read("models:\n  - {name: q, path: Qwen/Qwen3-8B}\nnodes:\n  - {name: n}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model q"), std::string::npos) << missing.status().message();
  unsetenv("HF_HUB_CACHE");
}

TEST_F(ClusterSpecTest, MalformedSpecsNameTheFileAndTheKey) {
  const std::string two = "models:\n  - {name: alpha, path: models/a}\n  - {name: beta, path: models/b}\n";
  struct Case {
    std::string text, says;
  } cases[] = {
      {two + "nodes:\n  - {name: n0}\n", "must say which model"},
      {two + "nodes:\n  - {name: n0, model: gamma}\n", "'gamma'"},
      {"model: models/a\nmodels:\n  - {name: a, path: models/a}\nnodes:\n  - {name: n0}\n", "not both"},
      {"models:\n  - {name: a, path: models/a}\n  - {name: a, path: models/b}\nnodes:\n  - {name: n}\n", "twice"},
      {"models:\n  - {path: models/a}\nnodes:\n  - {name: n}\n", "name and a path"},
      {"models:\n  - {name: a, path: models/nope}\nnodes:\n  - {name: n}\n", "is not a local path"},
      {"model: ../no/such/dir/x\nnodes:\n  - {name: n}\n", "does not exist"},
      {"model: models/a\nnodes:\n  - {name: n, role: leader}\n", "unknown role"},
      {"model: models/a\nnodes:\n  - {name: n}\n  - {name: n}\n", "given twice"},
      {"model: models/a\nnodes: []\n", "at least one node"},
      {"model: models/a\nnodes: [\n", "spec.yaml"},
      {"- a list\n", "mapping"},
      {two + "planner: {fleet: models/a, workload: models/a, slo: models/a}\nnodes:\n  - {name: n, model: alpha}\n",
       "planner: 'model' is required"},
      {"launchable: false\nlaunch_note: pool gpu is not here\n", "pool gpu is not here"},
  };
  for (const Case& c : cases) {
    auto s = read(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << c.text << "\n -> " << s.status().message();
    EXPECT_NE(s.status().message().find("spec.yaml"), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace tessera::solver
