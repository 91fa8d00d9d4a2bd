// `tessera tokenize` as a user runs it: ids and pieces for text, text for ids, on the repository's
// stories260K model (llama2.c tokenizer) and on llama.cpp's vocab-only GGUF files (no tensors) where that
// folder is present; bad input is a one-line error.
#include <gtest/gtest.h>

#include <algorithm>

#include <csignal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "http/http.h"

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
  // A vocabulary kind Tessera does not read (nomic-bert-moe's 't5', a Unigram model) is named; bert now loads.
  expect_one_line_error(tessera({"tokenize", "--model", vocabs + "/ggml-vocab-nomic-bert-moe.gguf", "hi"}), "'t5'");
  r = tessera({"tokenize", "--model", vocabs + "/ggml-vocab-bert-bge.gguf", "--ids", "hi"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// The routes on a real `tessera serve`: /tokenize gives the ids /v1/completions is charged for, and
// /detokenize turns them back into the prompt.
TEST(TokenizeRoutes, ServeAnswersTokenizeAndDetokenize) {
  TS_REQUIRE_STORIES260K();
  using json = nlohmann::json;
  testing::BackgroundProcess server(
      {testing::tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"});
  int port = testing::port_from_line(server.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto post = [&](const std::string& path, const json& body) {
    auto r = http::fetch(
        {.method = "POST", .url = url + path, .headers = {{"Content-Type", "application/json"}}, .body = body.dump()});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::pair{r->status, json::parse(r->body, nullptr, false)} : std::pair{0, json()};
  };
  const std::string prompt = "Once upon a time";
  auto [st, tk] = post("/tokenize", {{"model", "stories260K"}, {"prompt", prompt}});
  ASSERT_EQ(st, 200) << tk.dump();
  auto [cst, completion] =
      post("/v1/completions", {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}});
  ASSERT_EQ(cst, 200) << completion.dump();
  EXPECT_EQ(tk["count"], completion["usage"]["prompt_tokens"]);
  auto [dst, dt] =
      post("/detokenize", {{"model", "stories260K"}, {"tokens", tk["tokens"]}, {"skip_special_tokens", true}});
  ASSERT_EQ(dst, 200) << dt.dump();
  EXPECT_EQ(dt["prompt"], prompt);
  auto [est, err] = post("/detokenize", {{"tokens", {1, 100000}}});
  EXPECT_EQ(est, 400);
  EXPECT_EQ(err["error"]["param"], "tokens");
  auto [mst, merr] = post("/tokenize", {{"model", "gpt-9"}, {"prompt", "x"}});
  EXPECT_EQ(mst, 404);
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

// With --api-key the routes are keyed like /v1/*: no key, no tokens.
TEST(TokenizeRoutes, RequireTheApiKeyWhenOneIsSet) {
  TS_REQUIRE_STORIES260K();
  testing::BackgroundProcess server(
      {testing::tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0", "--api-key", "sekrit"});
  int port = testing::port_from_line(server.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  for (const char* path : {"/tokenize", "/detokenize"}) {
    std::string body = std::string(path) == "/tokenize" ? R"({"prompt":"hi"})" : R"({"tokens":[1]})";
    auto r = http::fetch(
        {.method = "POST", .url = url + path, .headers = {{"Content-Type", "application/json"}}, .body = body});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->status, 401) << path << " " << r->body;
    r = http::fetch({.method = "POST",
                     .url = url + path,
                     .headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer sekrit"}},
                     .body = body});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->status, 200) << path << " " << r->body;
  }
  EXPECT_EQ(server.stop(SIGTERM), 0);
}

TEST(TokenizeCli, MissingModelIsAnError) {
  expect_one_line_error(tessera({"tokenize", "--model", "/nonexistent/model.gguf", "hi"}), "does not exist");
}

}  // namespace
}  // namespace tessera
