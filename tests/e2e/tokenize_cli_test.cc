// `tessera tokenize` as a user runs it: ids and pieces for text, text for ids, on the repository's
// stories260K model (llama2.c tokenizer) and on llama.cpp's vocab-only GGUF files (no tensors) where that
// folder is present; bad input is a one-line error.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/load_tokenizer.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

testing::ProcessResult tessera(std::vector<std::string> args) {
  args.insert(args.begin(), testing::tessera_bin());
  return testing::run_process(args, 60.0);
}

void expect_one_line_error(const testing::ProcessResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

TEST(TokenizeCli, Stories260kIdsMatchTheTokenizerAndDetokenizeRoundTrips) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::stories260k_dir();
  auto tok = model::load_tokenizer(dir + "/tok512.bin");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = "Once upon a time, a girl named Lily";
  std::vector<model::TokenId> want = (*tok)->encode(text, true);
  auto r = tessera({"tokenize", "--model", dir, "--ids", text});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, fmt::format("[{}]\n", fmt::join(want, ", ")));
  r = tessera({"tokenize", "--model", dir, "--detokenize", fmt::format("[{}]", fmt::join(want, ", "))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, text + "\n");
  // The listing: one "<id> '<piece>'" line per token, BOS first.
  r = tessera({"tokenize", "--model", dir, text});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), static_cast<long>(want.size()));
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "      1 '<s>'");
}

TEST(TokenizeCli, VocabOnlyGgufFiles) {
  const std::string vocabs = testing::llamacpp_vocab_dir();
  if (vocabs.empty())
    GTEST_SKIP() << "llama.cpp's models/ folder is not here; looked in " << testing::llamacpp_vocab_candidates();
  const std::string llama3 = vocabs + "/ggml-vocab-llama-bpe.gguf";
  // Ids from llama.cpp's own vectors ("Hello world" -> 9906 1917), BOS 128000 as llama.cpp adds it.
  auto r = tessera({"tokenize", "--model", llama3, "--ids", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[128000, 9906, 1917]\n");
  r = tessera({"tokenize", "--model", llama3, "--ids", "--no-special", "Hello world<|eot_id|>"});
  EXPECT_EQ(r.out, "[9906, 1917, 128009]\n");
  r = tessera({"tokenize", "--model", llama3, "--ids", "--no-special", "--no-parse-special", "<|eot_id|>"});
  EXPECT_EQ(r.out.find("128009"), std::string::npos) << r.out;
  r = tessera({"tokenize", "--model", llama3, "--detokenize", "128000 9906,1917 128009"});
  EXPECT_EQ(r.out, "Hello world\n");
  r = tessera({"tokenize", "--model", llama3, "--keep-special", "--detokenize", "128000 9906 1917 128009"});
  EXPECT_EQ(r.out, "<|begin_of_text|>Hello world<|eot_id|>\n");
  r = tessera({"tokenize", "--model", llama3, "\n"});
  EXPECT_NE(r.out.find("'\\n'"), std::string::npos) << "control characters are escaped: " << r.out;

  expect_one_line_error(tessera({"tokenize", "--model", llama3, "--detokenize", "[1, x]"}), "'x' is not a token id");
  expect_one_line_error(tessera({"tokenize", "--model", llama3, "--detokenize", "128256"}),
                        "outside the vocabulary of 128256");
  expect_one_line_error(tessera({"tokenize", "--model", llama3}), "give TEXT");
  expect_one_line_error(tessera({"tokenize", "--model", vocabs + "/ggml-vocab-bert-bge.gguf", "hi"}), "'bert'");
}

TEST(TokenizeCli, MissingModelIsAnError) {
  expect_one_line_error(tessera({"tokenize", "--model", "/nonexistent/model.gguf", "hi"}), "does not exist");
}

}  // namespace
}  // namespace tessera
