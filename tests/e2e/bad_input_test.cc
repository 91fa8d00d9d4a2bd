// Bad input of every kind gets a one-line error naming the problem and a non-zero exit: no crash, no hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

// Runs tessera with `args`; expects a clean failure whose single stderr line mentions `needle`.
void expect_clean_error(const std::vector<std::string>& args, const std::string& needle) {
  std::vector<std::string> argv = {tessera_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv, 30.0);
  EXPECT_FALSE(r.timed_out) << "hung";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

std::string write(const std::string& path, const std::string& bytes) {
  EXPECT_TRUE(write_file_atomic(path, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}).ok());
  return path;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    dir_ = testing::scratch_dir();
    model_ = *read_file(testing::stories260k_dir() + "/stories260K.bin");
    tok_ = testing::stories260k_dir() + "/tok512.bin";
  }
  std::string dir_, model_, tok_;
};

TEST_F(BadInput, MissingModelFile) {
  expect_clean_error({"generate", "--model", dir_ + "/absent.bin", "--tokenizer", tok_}, "does not exist");
}

TEST_F(BadInput, TruncatedCheckpoint) {
  std::string p = write(dir_ + "/cut.bin", model_.substr(0, model_.size() / 2));
  expect_clean_error({"generate", "--model", p, "--tokenizer", tok_}, "truncated");
}

TEST_F(BadInput, AbsurdHeader) {
  std::string b = model_;
  int32_t layers = 1 << 30;
  std::memcpy(b.data() + 8, &layers, 4);
  std::string p = write(dir_ + "/absurd.bin", b);
  expect_clean_error({"generate", "--model", p, "--tokenizer", tok_}, "n_layers");
}

TEST_F(BadInput, CorruptWeights) {
  std::string b = model_;
  std::memset(b.data() + 1000, 0xff, 64);  // NaN bit patterns
  std::string p = write(dir_ + "/nan.bin", b);
  expect_clean_error({"generate", "--model", p, "--tokenizer", tok_}, "non-finite");
}

TEST_F(BadInput, GarbageFile) {
  std::string p = write(dir_ + "/garbage.bin", std::string(5000, '\x7f'));
  expect_clean_error({"generate", "--model", p, "--tokenizer", tok_}, "corrupt");
}

TEST_F(BadInput, TokenizerVocabularyMismatch) {
  std::string m = write(dir_ + "/m.bin", model_);
  auto tok = run_process({tessera_bin(), "synth", "--shape", "tiny", "--out", dir_ + "/other.bin", "--tokenizer-out",
                          dir_ + "/tok300.bin"});
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  // A 512-token synthetic tokenizer matches; cut it to 300 tokens to make it not.
  std::string t = *read_file(dir_ + "/tok300.bin");
  size_t off = 4;
  for (int i = 0; i < 300; ++i) {
    int32_t len;
    std::memcpy(&len, t.data() + off + 4, 4);
    off += 8 + static_cast<size_t>(len);
  }
  write(dir_ + "/tok300.bin", t.substr(0, off));
  expect_clean_error({"generate", "--model", m, "--tokenizer", dir_ + "/tok300.bin"}, "300 tokens");
}

TEST_F(BadInput, CorruptTokenizer) {
  std::string t = write(dir_ + "/t.bin", std::string("\x07\0\0\0\0\0\0\0\xff\xff\0\0", 12));
  expect_clean_error({"generate", "--model", testing::stories260k_dir() + "/stories260K.bin", "--tokenizer", t},
                     "not a llama2.c tokenizer");
}

TEST_F(BadInput, UnknownFlag) { expect_clean_error({"generate", "--model", "x", "--frobnicate"}, "frobnicate"); }

TEST_F(BadInput, UnknownSubcommand) { expect_clean_error({"fly"}, "fly"); }

TEST_F(BadInput, UnknownBackendListsTheAvailableOnes) {
  expect_clean_error({"generate", "--model", testing::stories260k_dir(), "--backend", "tpu"},
                     "unknown backend 'tpu'; known: ref");
}

TEST_F(BadInput, BadSamplingValues) {
  expect_clean_error({"generate", "--model", testing::stories260k_dir(), "--temperature", "-1"}, "temperature");
  expect_clean_error({"generate", "--model", testing::stories260k_dir(), "--top-p", "2"}, "top_p");
  expect_clean_error({"generate", "--model", testing::stories260k_dir(), "--max-tokens", "lots"}, "max-tokens");
}

TEST_F(BadInput, PromptLongerThanTheContext) {
  std::string prompt;
  for (int i = 0; i < 600; ++i) prompt += " xq";
  expect_clean_error({"generate", "--model", testing::stories260k_dir(), "--prompt", prompt}, "context");
}

TEST_F(BadInput, UnknownSynthShape) {
  expect_clean_error({"synth", "--shape", "huge", "--out", dir_ + "/x.bin"}, "known shapes: tiny, stories15M");
}

// A shape whose weights do not fit the memory the process may take (here an address-space limit of 4 GB under
// llama3.1-8b's 30 GiB of f32) is an error naming what it needs, not an abort on std::bad_alloc.
TEST_F(BadInput, SynthShapeLargerThanMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "an address-space limit leaves no room for the sanitizer's shadow memory";
#endif
  const std::string out = dir_ + "/8b.gguf";
  auto r = run_process({"/bin/sh", "-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", tessera_bin(), "synth", "--shape",
                        "llama3.1-8b", "--format", "gguf", "--dtype", "q4_k", "--out", out},
                       60.0);
  EXPECT_FALSE(r.timed_out) << "hung";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("tessera: error: not enough memory to synthesise llama3.1-8b", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("29.9 GiB"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));

  // gemma4's shapes are drawn by their own writer (26B parameters here).
  const std::string g = dir_ + "/gemma4.gguf";
  r = run_process({"/bin/sh", "-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", tessera_bin(), "synth", "--shape",
                   "gemma4-26b-a4b", "--format", "gguf", "--out", g},
                  60.0);
  EXPECT_FALSE(r.timed_out) << "hung";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("tessera: error: not enough memory to synthesise gemma4-26b-a4b", 0), 0u) << r.err;
  EXPECT_FALSE(std::filesystem::exists(g));
}

}  // namespace
}  // namespace tessera
