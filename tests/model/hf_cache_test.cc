// Hugging Face cache references (model/hf_cache.h) on a cache laid out as huggingface_hub lays it out.
#include "model/hf_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "support/paths.h"

namespace tessera::model {
namespace {

namespace fs = std::filesystem;

TEST(HfCache, RepositoryIdsAreRecognised) {
  EXPECT_TRUE(looks_like_repo_id("Qwen/Qwen3-0.6B"));
  EXPECT_TRUE(looks_like_repo_id("meta-llama/Llama-3.2-1B@main"));
  EXPECT_TRUE(looks_like_repo_id("org/name@0123abc"));
  for (const char* not_id :
       {"model.gguf", "/abs/path", "./rel/path", "a/b/c", "../x", "org/", "/name", "org/na me", "org/name@", "org/.."})
    EXPECT_FALSE(looks_like_repo_id(not_id)) << not_id;
}

TEST(HfCache, RefsCommitsAndPrefixesResolveToTheirSnapshot) {
  const fs::path root = testing::scratch_dir();
  const fs::path m = root / "hub" / "models--Org--Name";
  fs::create_directories(m / "refs");
  fs::create_directories(m / "snapshots" / "aaaaaaaa11111111");
  fs::create_directories(m / "snapshots" / "bbbbbbbb22222222");
  std::ofstream(m / "refs" / "main") << "aaaaaaaa11111111\n";
  std::ofstream(m / "refs" / "v2") << "bbbbbbbb22222222";
  setenv("HF_HUB_CACHE", (root / "hub").c_str(), 1);
  EXPECT_EQ(hf_hub_cache_dir(), (root / "hub").string());
  auto main = resolve_model_reference("Org/Name");
  ASSERT_TRUE(main.ok()) << main.status().to_string();
  EXPECT_EQ(main->path, (m / "snapshots" / "aaaaaaaa11111111").string());
  EXPECT_EQ(main->repo_id, "Org/Name");
  EXPECT_EQ(resolve_model_reference("Org/Name@v2")->commit, "bbbbbbbb22222222");
  EXPECT_EQ(resolve_model_reference("Org/Name@bbbbbbb")->commit, "bbbbbbbb22222222");
  EXPECT_EQ(resolve_model_reference("Org/Name@v3").status().code(), StatusCode::kNotFound);
  auto absent = resolve_model_reference("Org/Other");
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("huggingface-cli download Org/Other"), std::string::npos);
  // A path that exists is itself, whatever it looks like.
  fs::create_directories(root / "Org" / "Local");
  const fs::path cwd = fs::current_path();
  fs::current_path(root);
  auto local = resolve_model_reference("Org/Local");
  fs::current_path(cwd);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->path, "Org/Local");
  EXPECT_TRUE(local->repo_id.empty());
  unsetenv("HF_HUB_CACHE");
}

}  // namespace
}  // namespace tessera::model
