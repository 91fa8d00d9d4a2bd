// `tessera serve` as a user coming from vLLM types it (issue 32 item 4), against real processes: the model as a
// positional argument or as ORG/NAME[@REV] from a Hugging Face cache laid out as huggingface_hub lays it out
// (refs/, snapshots/ of symlinks into blobs/); a missing reference says where it looked and how to download it;
// --config FILE.yaml means what the same flags mean; several --served-model-name; --kv-memory-fraction; vLLM's
// --dtype and --kv-cache-dtype names; CORS with --allowed-origins.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Node {
  std::unique_ptr<testing::BackgroundProcess> p;
  std::string url;
};

Node serve(std::vector<std::string> args) {
  args.insert(args.begin(), {testing::tessera_bin(), "serve"});
  Node n;
  n.p = std::make_unique<testing::BackgroundProcess>(args);
  const int port = testing::port_from_line(n.p->wait_for_line("listening on"));
  if (port > 0) n.url = "http://127.0.0.1:" + std::to_string(port);
  return n;
}

json get(const std::string& url) {
  auto r = http::fetch({.url = url});
  EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
  return r.ok() ? json::parse(r->body, nullptr, false) : json();
}

std::string complete(const std::string& url, const std::string& model) {
  auto r = http::fetch(
      {.method = "POST",
       .url = url + "/v1/completions",
       .headers = {{"Content-Type", "application/json"}},
       .body = json{{"model", model}, {"prompt", "Once upon"}, {"max_tokens", 12}, {"temperature", 0}}.dump()});
  EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
  return r.ok() ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : "";
}

// A Hugging Face cache under `root` holding `repo` at commit `commit` (refs/main), its one file a symlink into
// blobs/ as huggingface_hub stores it.
void make_hf_cache(const fs::path& root, const std::string& repo, const std::string& commit, const fs::path& gguf) {
  std::string folder = "models--" + repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path m = root / "hub" / folder;
  fs::create_directories(m / "refs");
  fs::create_directories(m / "blobs");
  fs::create_directories(m / "snapshots" / commit);
  std::ofstream(m / "refs" / "main") << commit;
  fs::copy_file(gguf, m / "blobs" / "0123456789abcdef");
  fs::create_symlink("../../blobs/0123456789abcdef", m / "snapshots" / commit / "model.gguf");
}

class ServeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    dir_ = testing::scratch_dir();
    gguf_ = dir_ + "/stories260K.gguf";
    auto c = testing::run_process({testing::tessera_bin(), "convert", testing::stories260k_dir(), gguf_}, 120.0);
    ASSERT_EQ(c.exit_code, 0) << c.err;
  }
  std::string dir_, gguf_;
};

TEST_F(ServeCli, AHuggingFaceReferenceServesFromTheLocalCacheUnderItsRepositoryId) {
  const std::string commit = "3f1c2b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b";
  make_hf_cache(dir_ + "/hf", "TinyStories/stories260K", commit, gguf_);
  setenv("HF_HOME", (dir_ + "/hf").c_str(), 1);
  unsetenv("HF_HUB_CACHE");
  Node direct = serve({gguf_, "--port", "0"});  // positional path
  Node cached = serve({"TinyStories/stories260K", "--port", "0"});
  Node pinned = serve({"TinyStories/stories260K@3f1c2b0", "--port", "0"});
  ASSERT_FALSE(direct.url.empty());
  ASSERT_FALSE(cached.url.empty());
  ASSERT_FALSE(pinned.url.empty());
  EXPECT_EQ(get(cached.url + "/v1/models")["data"][0]["id"], "TinyStories/stories260K");
  const std::string want = complete(direct.url, "stories260K");
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(complete(cached.url, "TinyStories/stories260K"), want);
  EXPECT_EQ(complete(pinned.url, "TinyStories/stories260K"), want);
  // Not in the cache: one line naming where it looked and how to get it.
  auto missing = testing::run_process({testing::tessera_bin(), "serve", "Org/absent-model", "--port", "0"}, 60.0);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("models--Org--absent-model"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("huggingface-cli download Org/absent-model"), std::string::npos) << missing.err;
  auto bad_rev =
      testing::run_process({testing::tessera_bin(), "serve", "TinyStories/stories260K@v9", "--port", "0"}, 60.0);
  EXPECT_EQ(bad_rev.exit_code, 1);
  EXPECT_NE(bad_rev.err.find("revision 'v9'"), std::string::npos) << bad_rev.err;
  auto none = testing::run_process({testing::tessera_bin(), "serve", "--port", "0"}, 60.0);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no model given"), std::string::npos) << none.err;
  unsetenv("HF_HOME");
}

TEST_F(ServeCli, AConfigFileMeansWhatTheSameFlagsMean) {
  const std::string cfg = dir_ + "/serve.yaml";
  std::ofstream(cfg) << "model: " << gguf_ << "\n"
                     << "port: 0\nmax_model_len: 96\nkv-memory: 32\n"
                     << "served-model-name: [tiny, tiny-alias]\nno-prefix-cache: true\n";
  Node from_file = serve({"--config", cfg});
  Node from_flags = serve({gguf_, "--port", "0", "--max-model-len", "96", "--kv-memory", "32", "--served-model-name",
                           "tiny", "--served-model-name", "tiny-alias", "--no-prefix-cache"});
  ASSERT_FALSE(from_file.url.empty());
  ASSERT_FALSE(from_flags.url.empty());
  const json a = get(from_file.url + "/v1/models"), b = get(from_flags.url + "/v1/models");
  ASSERT_EQ(a["data"].size(), 2u) << a.dump();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a["data"][i]["id"], b["data"][i]["id"]);
    EXPECT_EQ(a["data"][i]["max_model_len"], 96);
    EXPECT_EQ(b["data"][i]["max_model_len"], 96);
  }
  EXPECT_EQ(a["data"][1]["id"], "tiny-alias");
  const json ha = get(from_file.url + "/health"), hb = get(from_flags.url + "/health");
  EXPECT_EQ(ha.dump(), hb.dump());
  // Either name reaches the model, and the answer names the first.
  EXPECT_EQ(complete(from_file.url, "tiny-alias"), complete(from_file.url, "tiny"));
  // The command line wins over the file; a key that is no flag is a clear error.
  Node overridden = serve({"--config", cfg, "--max-model-len", "64"});
  ASSERT_FALSE(overridden.url.empty());
  EXPECT_EQ(get(overridden.url + "/v1/models")["data"][0]["max_model_len"], 64);
  std::ofstream(dir_ + "/bad.yaml") << "model: " << gguf_ << "\nwarp-speed: 9\n";
  auto bad = testing::run_process({testing::tessera_bin(), "serve", "--config", dir_ + "/bad.yaml"}, 60.0);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("warp-speed"), std::string::npos) << bad.err;
}

TEST_F(ServeCli, VllmNamesForMemoryAndTypes) {
  Node n = serve(
      {gguf_, "--port", "0", "--kv-memory-fraction", "0.01", "--dtype", "float32", "--kv-cache-dtype", "float32"});
  ASSERT_FALSE(n.url.empty());
  EXPECT_FALSE(complete(n.url, "stories260K").empty());
  const json h = get(n.url + "/health");
  EXPECT_GT(h.value("kv_blocks_total", 0), 0) << h.dump();
  auto fp8 = testing::run_process({testing::tessera_bin(), "serve", gguf_, "--kv-cache-dtype", "fp8"}, 60.0);
  EXPECT_EQ(fp8.exit_code, 2);
  EXPECT_NE(fp8.err.find("kv-cache-dtype"), std::string::npos) << fp8.err;
  auto both = testing::run_process(
      {testing::tessera_bin(), "serve", gguf_, "--kv-memory", "64", "--kv-memory-fraction", "0.5"}, 60.0);
  EXPECT_EQ(both.exit_code, 2);
}

TEST_F(ServeCli, BrowsersFromAllowedOriginsOnly) {
  Node n = serve({gguf_, "--port", "0", "--allowed-origins", R"(["https://app.example"])"});
  ASSERT_FALSE(n.url.empty());
  auto pre = http::fetch({.method = "OPTIONS",
                          .url = n.url + "/v1/chat/completions",
                          .headers = {{"Origin", "https://app.example"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization, content-type"}}});
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->headers["access-control-allow-origin"], "https://app.example");
  EXPECT_NE(pre->headers["access-control-allow-methods"].find("POST"), std::string::npos);
  EXPECT_EQ(pre->headers["access-control-allow-headers"], "authorization, content-type");
  auto ok = http::fetch({.url = n.url + "/v1/models", .headers = {{"Origin", "https://app.example"}}});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->headers["access-control-allow-origin"], "https://app.example");
  auto other = http::fetch({.url = n.url + "/v1/models", .headers = {{"Origin", "https://evil.example"}}});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->headers.count("access-control-allow-origin"), 0u);
  auto other_pre =
      http::fetch({.method = "OPTIONS",
                   .url = n.url + "/v1/models",
                   .headers = {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "GET"}}});
  ASSERT_TRUE(other_pre.ok());
  EXPECT_EQ(other_pre->status, 403);
  auto bad = testing::run_process({testing::tessera_bin(), "serve", gguf_, "--allowed-origins", "app.example"}, 60.0);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("not an origin"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tessera
