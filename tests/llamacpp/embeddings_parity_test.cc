// Tessera's /v1/embeddings against llama.cpp's `llama-server --embeddings` on the same GGUF file (issue 29 item 5):
// for a qwen3 shape (Qwen3-Embedding: causal, last-token pooling, the EOS appended) and two bert shapes (bge-small:
// [CLS] pooling; bert-base: mean pooling; WordPiece vocabulary, non-causal attention, LayerNorm, GELU), every input's
// embedding must have cosine similarity >= 0.9999 with llama.cpp's, and the texts must tokenize to the same ids
// (each server's own /tokenize, special tokens added as an embedding request adds them).
//
// `tessera synth --small` writes each model as GGUF (f32); llama.cpp's `llama-quantize` makes F16 and Q8_0 copies.
// Inputs: texts (ASCII words and punctuation, repeated phrases of about 300 tokens, a mixed-case and accented
// line) and token-id lists (random ids, sent as they are by both servers). llama-server normalises (its default
// embd_normalize 2), as Tessera does for GGUF files. The worst cosine per file is printed and recorded as the test
// property `worst_cosine_<label>`. Skips, saying why, without llama.cpp's binaries; label `llamacpp`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "http/http.h"
#include "llamacpp/peer.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kThreads = 2;
constexpr double kMinCosine = 0.9999;

struct EmbedShape {
  std::string name;
  std::string synth_shape;
  std::vector<std::string> flags;  // more `tessera synth` flags
};

void PrintTo(const EmbedShape& s, std::ostream* os) { *os << s.name; }

// Widths of 128 (4 heads of 32) keep q8_0 rows whole and the files small; four layers show errors compounding.
const EmbedShape kShapes[] = {
    {"qwen3_embedding", "qwen3-embedding-0.6b", {"--dim", "128", "--hidden-dim", "256", "--layers", "4"}},
    {"bge_small_cls", "bge-small", {"--dim", "128", "--hidden-dim", "256", "--layers", "4"}},
    {"bert_base_mean", "bert-base", {"--dim", "128", "--hidden-dim", "256", "--layers", "3"}},
};

std::vector<std::string> texts() {
  std::vector<std::string> t = {"hello world",
                                "The quick brown fox jumps over the lazy dog.",
                                "a",
                                "Embeddings, rankings & retrieval: (tests) [42] -- done!",
                                "Hello World again; CAPITALS and café, naïve résumé",
                                "semantic search needs vectors"};
  std::string long_text;
  for (int i = 0; i < 8; ++i) long_text += "the model reads this sentence number " + std::to_string(i) + " again. ";
  t.push_back(long_text);
  return t;
}

std::vector<std::vector<int32_t>> token_inputs(int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int len : {1, 5, 33, 120}) {
    std::vector<int32_t> ids;
    // Ids above the synthetic vocabularies' special tokens (bert: 0-4; llama2.c-style: 0-258 are special and bytes).
    for (int i = 0; i < len; ++i) ids.push_back(static_cast<int32_t>(260 + rng() % static_cast<uint64_t>(vocab - 260)));
    out.push_back(std::move(ids));
  }
  return out;
}

json post(const std::string& url, const json& body) {
  auto r = http::fetch({.method = "POST",
                        .url = url,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 120000});
  if (!r.ok()) {
    ADD_FAILURE() << url << ": " << r.status().to_string();
    return {};
  }
  if (r->status != 200) {
    ADD_FAILURE() << url << " answered " << r->status << ": " << r->body;
    return {};
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) ADD_FAILURE() << url << " answered no JSON: " << r->body.substr(0, 200);
  return j;
}

std::vector<std::vector<double>> vectors(const json& answer) {
  std::vector<std::vector<double>> out;
  if (!answer.is_object() || !answer.contains("data")) return out;
  for (const json& d : answer["data"]) out.push_back(d["embedding"].get<std::vector<double>>());
  return out;
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty()) return -2;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

class EmbeddingsParity : public ::testing::TestWithParam<EmbedShape> {};

TEST_P(EmbeddingsParity, CosineAtLeast0_9999WithLlamaServer) {
  TS_REQUIRE_LLAMACPP();
  const EmbedShape& shape = GetParam();
  const std::string dir = testing::scratch_dir();
  const std::string base = dir + "/" + shape.name;
  std::vector<std::string> synth = {testing::tessera_bin(),
                                    "synth",
                                    "--shape",
                                    shape.synth_shape,
                                    "--small",
                                    "--format",
                                    "gguf",
                                    "--dtype",
                                    "f32",
                                    "--seed",
                                    "7",
                                    "--out",
                                    base + ".gguf"};
  synth.insert(synth.end(), shape.flags.begin(), shape.flags.end());
  testing::ProcessResult s = testing::run_process(synth, 300.0);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::vector<std::string> all_texts = texts();
  for (const std::string preset : {"f32", "F16", "Q8_0"}) {
    SCOPED_TRACE(preset);
    std::string file = base + ".gguf";
    if (preset != "f32") {
      file = base + "-" + preset + ".gguf";
      const std::string err = testing::llamacpp_quantize(base + ".gguf", file, preset, {});
      ASSERT_TRUE(err.empty()) << err;
    }
    json ref_texts, ref_ids;
    std::vector<std::vector<int32_t>> ref_tokens;
    const std::vector<std::vector<int32_t>> ids = token_inputs(512, 99);
    {
      testing::LlamaServer peer(file, 512, kThreads, 120.0, {"--embeddings"});
      ASSERT_TRUE(peer.ready()) << peer.error();
      ref_texts = post(peer.url() + "/v1/embeddings", {{"input", all_texts}, {"model", "parity"}});
      ref_ids = post(peer.url() + "/v1/embeddings", {{"input", ids}, {"model", "parity"}});
      for (const std::string& t : all_texts) {
        json tk = post(peer.url() + "/tokenize", {{"content", t}, {"add_special", true}, {"parse_special", true}});
        ref_tokens.push_back(tk.value("tokens", std::vector<int32_t>{}));
      }
      ASSERT_EQ(peer.failure(), "");
    }
    testing::BackgroundProcess ours({testing::tessera_bin(), "serve", "--model", file, "--port", "0", "--backend",
                                     "cpu", "--threads", std::to_string(kThreads), "--served-model-name", "parity"});
    const int port = testing::port_from_line(ours.wait_for_line("listening on", 120.0));
    ASSERT_GT(port, 0) << "tessera serve did not start on " << file;
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    const json our_texts = post(url + "/v1/embeddings", {{"input", all_texts}, {"model", "parity"}});
    const json our_ids = post(url + "/v1/embeddings", {{"input", ids}, {"model", "parity"}});
    for (size_t i = 0; i < all_texts.size(); ++i) {
      json tk = post(url + "/tokenize", {{"prompt", all_texts[i]}, {"add_special_tokens", true}, {"model", "parity"}});
      EXPECT_EQ(tk.value("tokens", std::vector<int32_t>{}), ref_tokens[i]) << "text " << i << ": " << all_texts[i];
    }
    ASSERT_TRUE(our_texts.is_object() && ref_texts.is_object() && our_ids.is_object() && ref_ids.is_object());
    EXPECT_EQ(our_texts["usage"]["prompt_tokens"], ref_texts["usage"]["prompt_tokens"]);
    EXPECT_EQ(our_ids["usage"]["prompt_tokens"], ref_ids["usage"]["prompt_tokens"]);
    double worst = 1;
    int compared = 0;
    for (const auto& [ours_v, theirs_v, what] : {std::tuple{vectors(our_texts), vectors(ref_texts), "text"},
                                                 std::tuple{vectors(our_ids), vectors(ref_ids), "token ids"}}) {
      ASSERT_EQ(ours_v.size(), theirs_v.size()) << what;
      for (size_t i = 0; i < ours_v.size(); ++i) {
        const double c = cosine(ours_v[i], theirs_v[i]);
        EXPECT_GE(c, kMinCosine) << what << " input " << i << " (" << ours_v[i].size() << " vs " << theirs_v[i].size()
                                 << " dimensions)";
        worst = std::min(worst, c);
        ++compared;
      }
    }
    std::printf("embeddings parity %s %s: %d inputs, worst cosine %.8f\n", shape.name.c_str(), preset.c_str(), compared,
                worst);
    RecordProperty("worst_cosine_" + preset, std::to_string(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingsParity, ::testing::ValuesIn(kShapes),
                         [](const auto& info) { return info.param.name; });

// The rule can fail: Tessera made to pool bge-small by mean (--pooling mean) instead of the file's [CLS] is
// rejected against llama.cpp on the same inputs.
TEST(EmbeddingsParityControl, AnotherPoolingIsRejected) {
  TS_REQUIRE_LLAMACPP();
  const std::string file = testing::scratch_dir() + "/bge.gguf";
  testing::ProcessResult s =
      testing::run_process({testing::tessera_bin(), "synth", "--shape", "bge-small", "--small", "--format", "gguf",
                            "--seed", "7", "--dim", "128", "--hidden-dim", "256", "--layers", "4", "--out", file},
                           300.0);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::vector<std::string> all_texts = texts();
  json ref;
  {
    testing::LlamaServer peer(file, 512, kThreads, 120.0, {"--embeddings"});
    ASSERT_TRUE(peer.ready()) << peer.error();
    ref = post(peer.url() + "/v1/embeddings", {{"input", all_texts}, {"model", "parity"}});
  }
  testing::BackgroundProcess ours({testing::tessera_bin(), "serve", "--model", file, "--port", "0", "--backend", "cpu",
                                   "--threads", std::to_string(kThreads), "--served-model-name", "parity", "--pooling",
                                   "mean"});
  const int port = testing::port_from_line(ours.wait_for_line("listening on", 120.0));
  ASSERT_GT(port, 0);
  const json mine =
      post("http://127.0.0.1:" + std::to_string(port) + "/v1/embeddings", {{"input", all_texts}, {"model", "parity"}});
  const auto a = vectors(mine), b = vectors(ref);
  ASSERT_EQ(a.size(), b.size());
  int rejected = 0;
  for (size_t i = 0; i < a.size(); ++i) rejected += cosine(a[i], b[i]) < kMinCosine ? 1 : 0;
  EXPECT_EQ(rejected, static_cast<int>(a.size())) << "mean pooling passed for some inputs pooled by [CLS]";
}

}  // namespace
}  // namespace tessera
