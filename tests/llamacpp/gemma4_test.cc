// Gemma 4 files from `tessera synth` against llama.cpp (issue 28): llama.cpp's own tools must load what Tessera
// writes, and Tessera's gemma4 tokenizer must agree with llama.cpp's on it.
//
// For the dense E2B shape (per-layer embeddings, a KV-sharing layer, sliding layers with head size 32 and full
// ones with 64, a double-wide MLP where KV is shared) and the MoE 26B-A4B shape (8 experts beside a dense MLP,
// full layers with one KV head and V = K), each at test size with K-quant-friendly widths:
//  - `llama-server` loads the file as written (f32) and after `llama-quantize` Q8_0 and Q4_K_M, and continues 8
//    random token-id prompts greedily without failing;
//  - `tessera tokenize` gives the ids llama-server's /tokenize gives, and the text its /detokenize gives, on texts
//    with spaces, newline runs, bytes outside the vocabulary and the <turn|> control token;
//  - Tessera generates from both (their greedy parity with llama.cpp: parity_test.cc, `gemma4_e2b` and
//    `gemma4_26b_a4b`).
// Skips, saying why, when llama.cpp's binaries are absent; labelled `llamacpp`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "http/http.h"
#include "llamacpp/peer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::run_process;

struct Gemma4Case {
  std::string name, shape, layers;
};
void PrintTo(const Gemma4Case& c, std::ostream* os) { *os << c.name; }

class LlamaCppGemma4 : public ::testing::TestWithParam<Gemma4Case> {};

json post(const std::string& url, const json& body) {
  auto r = http::fetch({.method = "POST",
                        .url = url,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 60000});
  if (!r.ok() || r->status != 200) {
    ADD_FAILURE() << url << ": " << (r.ok() ? std::to_string(r->status) + " " + r->body : r.status().to_string());
    return json();
  }
  return json::parse(r->body, nullptr, false);
}

TEST_P(LlamaCppGemma4, LlamaServerLoadsAndQuantizesTheSynthFileAndTokenizesAsTessera) {
  TS_REQUIRE_LLAMACPP();
  const std::string dir = testing::scratch_dir();
  const std::string f32 = dir + "/" + GetParam().name + ".gguf";
  auto w = run_process(
      {testing::tessera_bin(), "synth", "--shape", GetParam().shape, "--small", "--dim", "256", "--hidden-dim", "512",
       "--layers", GetParam().layers, "--rare-byte-tokens", "--format", "gguf", "--seed", "7", "--out", f32},
      300.0);
  ASSERT_EQ(w.exit_code, 0) << w.err;

  // Tessera computes both variants.
  auto gen = run_process({testing::tessera_bin(), "generate", "--model", f32, "--prompt", "hi", "--max-tokens", "2"});
  EXPECT_EQ(gen.exit_code, 0) << gen.err;

  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p = {2};
    const int len = 4 + static_cast<int>(rng() % 45);
    for (int k = 0; k < len; ++k) p.push_back(6 + static_cast<int32_t>(rng() % 506));
    prompts.push_back(std::move(p));
  }
  const std::vector<std::string> texts = {"Hello world", "  two  spaces\n\n\nthree newlines\n",
                                          "caf\xC3\xA9 \xE2\x82\xAC", "<turn|>model\nhi<turn|>", "a\tb ~!{}"};
  for (const std::string preset : {"", "Q8_0", "Q4_K_M"}) {
    SCOPED_TRACE(preset.empty() ? std::string("f32 as written") : preset);
    std::string model = f32;
    if (!preset.empty()) {
      model = dir + "/" + GetParam().name + "-" + preset + ".gguf";
      const std::string err = testing::llamacpp_quantize(f32, model, preset, {});
      ASSERT_TRUE(err.empty()) << err;
    }
    testing::LlamaServer peer(model, 512, 1);
    ASSERT_TRUE(peer.ready()) << peer.error();
    int tokens = 0;
    for (const auto& p : prompts) tokens += static_cast<int>(peer.complete(p, 24).ids.size());
    EXPECT_GT(tokens, 8 * 4) << "llama-server generated almost nothing";
    EXPECT_EQ(peer.failure(), "");
    if (!preset.empty()) continue;
    for (const std::string& text : texts) {
      json want = post(peer.url() + "/tokenize", {{"content", text}, {"add_special", true}});
      ASSERT_TRUE(want.is_object() && want.contains("tokens")) << want.dump();
      auto ours = run_process({testing::tessera_bin(), "tokenize", "--model", model, "--ids", text});
      ASSERT_EQ(ours.exit_code, 0) << ours.err;
      EXPECT_EQ(json::parse(ours.out, nullptr, false), want["tokens"]) << text;
      // And back: llama.cpp's text for the ids (special tokens spelled), as Tessera spells it.
      json back = post(peer.url() + "/detokenize", {{"tokens", want["tokens"]}});
      ASSERT_TRUE(back.is_object() && back.contains("content")) << back.dump();
      auto ours_back = run_process({testing::tessera_bin(), "tokenize", "--model", model, "--keep-special",
                                    "--detokenize", want["tokens"].dump()});
      ASSERT_EQ(ours_back.exit_code, 0) << ours_back.err;
      std::string got = ours_back.out;
      if (!got.empty() && got.back() == '\n') got.pop_back();
      EXPECT_EQ(got, back["content"].get<std::string>()) << text;
    }
  }
}

// The real Gemma 4 vocabulary (llama.cpp's ggml-vocab-gemma-4.gguf) on seeded random texts made of words,
// whitespace and newline runs, accents, CJK, emoji, byte-fallback characters and special-token spellings:
// Tessera's ids equal `llama-tokenize`'s (BOS added), with special tokens parsed and without.
TEST(LlamaCppGemma4Vocab, RandomTextsTokenizeAsLlamaTokenize) {
  TS_REQUIRE_LLAMACPP();
  const std::string vocab_dir = testing::llamacpp_vocab_dir();
  if (vocab_dir.empty())
    GTEST_SKIP() << "llama.cpp's models/ folder is not here; looked in " << testing::llamacpp_vocab_candidates();
  const std::string vocab = vocab_dir + "/ggml-vocab-gemma-4.gguf";
  auto tok = model::load_gguf_tokenizer(vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // clang-format off
  const std::vector<std::string> pieces = {
      "hello", "World", " ", "  ", "\n", "\n\n", "\n\n\n", "\t", "\xC3\xA9", "\xC3\x9F", "\xE6\x97\xA5\xE6\x9C\xAC",
      "\xF0\x9F\x98\x80", "<turn|>", "<|turn>", "</s>", "<bos>", "<|tool_response>", "<|channel>", "123", "4567",
      "  \n ", "$%^&", "don't", "\xEF\xAC\x81", "\xC2\xA0", "\xE2\x80\x8B", "\xE2\x96\x81", "<0x41>", "\r\n",
      "xxxxxxxxxxxxxxxxxxxxxxxx"};
  // clang-format on
  std::mt19937_64 rng(5);
  const std::string dir = testing::scratch_dir();
  int checked = 0;
  for (int i = 0; i < 12; ++i) {
    std::string text;
    for (int k = 1 + static_cast<int>(rng() % 12); k > 0; --k) text += pieces[rng() % pieces.size()];
    const std::string file = dir + "/t" + std::to_string(i) + ".txt";
    std::ofstream(file, std::ios::binary) << text;
    for (bool parse_special : {true, false}) {
      std::vector<std::string> argv = {
          testing::llamacpp_bin_dir() + "/llama-tokenize", "-m", vocab, "-f", file, "--ids", "--log-disable"};
      if (!parse_special) argv.push_back("--no-parse-special");
      auto r = run_process(argv, 60.0);
      ASSERT_EQ(r.exit_code, 0) << testing::peer_failure(r) << r.err;
      const std::string last = r.out.substr(r.out.rfind('[', r.out.size()));
      json want = json::parse(last, nullptr, false);
      ASSERT_TRUE(want.is_array()) << r.out;
      std::vector<model::TokenId> ours = (*tok)->tokenize(text, {.add_special = true, .parse_special = parse_special});
      EXPECT_EQ(json(ours), want) << "parse_special " << parse_special << ": " << json(text).dump();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LlamaCppGemma4,
                         ::testing::Values(Gemma4Case{"gemma4_e2b", "gemma4-e2b", "6"},
                                           Gemma4Case{"gemma4_26b_a4b", "gemma4-26b-a4b", "6"},
                                           // Fewer layers than one sliding period: no full layer at all.
                                           Gemma4Case{"gemma4_e2b_2_layers", "gemma4-e2b", "2"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
