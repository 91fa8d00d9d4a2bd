#include "model/loader.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>

#include "base/mapped_file.h"
#include "model/llama2c/llama2c_checkpoint.h"
#include "model/synth.h"
#include "support/paths.h"

namespace tessera::model {
namespace {
namespace fs = std::filesystem;

TEST(LoadModel, DirectoryNeedsNoTokenizerFlag) {
  TS_REQUIRE_STORIES260K();
  auto m = load_model(testing::stories260k_dir());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->name, "stories260K");
  EXPECT_EQ(fs::path(m->tokenizer_path).filename(), "tok512.bin");
  EXPECT_EQ(m->tokenizer->vocab_size(), 512);
}

TEST(LoadModel, FileNeedsATokenizer) {
  TS_REQUIRE_STORIES260K();
  auto m = load_model(testing::stories260k_dir() + "/stories260K.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--tokenizer"), std::string::npos);
  auto ok = load_model(testing::stories260k_dir() + "/stories260K.bin", testing::stories260k_dir() + "/tok512.bin");
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

TEST(LoadModel, MissingPathIsNotFound) {
  auto m = load_model("/nonexistent/model.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

// A named pipe has no writer here: reading its first bytes to recognise the format would wait forever.
TEST(LoadModel, APipeOrDeviceIsRefusedNotRead) {
  const std::string fifo = testing::scratch_dir() + "/model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto m = load_model(fifo, "", /*require_tokenizer=*/false);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("not a regular file"), std::string::npos) << m.status().message();
  TS_REQUIRE_STORIES260K();
  auto t = load_model(testing::stories260k_dir() + "/stories260K.bin", fifo);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos) << t.status().message();
  EXPECT_FALSE(load_model("/dev/null", "", false).ok());
}

TEST(LoadModel, TokenizerMustMatchTheVocabulary) {
  std::string dir = testing::scratch_dir();
  auto config = synth_shape("tiny");
  ASSERT_TRUE(config.ok());
  config->n_layers = 1;
  config->vocab_size = 300;
  SynthModel m = synthesize_weights(*config, 1);
  ASSERT_TRUE(write_llama2c_checkpoint(dir + "/m.bin", m.config, m.weights).ok());
  ASSERT_TRUE(write_file_atomic(dir + "/t.bin", synthesize_tokenizer(400, 1)->serialize()).ok());
  auto r = load_model(dir + "/m.bin", dir + "/t.bin");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("400 tokens"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("300"), std::string::npos);
}

TEST(LoadModel, AmbiguousDirectoryIsAnError) {
  std::string dir = testing::scratch_dir();
  auto config = synth_shape("tiny");
  ASSERT_TRUE(config.ok());
  config->n_layers = 1;
  SynthModel m = synthesize_weights(*config, 1);
  ASSERT_TRUE(write_llama2c_checkpoint(dir + "/a.bin", m.config, m.weights).ok());
  ASSERT_TRUE(write_llama2c_checkpoint(dir + "/b.bin", m.config, m.weights).ok());
  auto r = load_model(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 checkpoints"), std::string::npos) << r.status().message();
  auto empty = load_model(testing::scratch_dir());
  EXPECT_NE(empty.status().message().find("no llama2.c checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace tessera::model
