// /v1/embeddings as a user runs it: `tessera synth` writes each embedding shape as a GGUF file and as a Hugging Face
// folder (sentence-transformers' modules.json, tokenizer.json for bert), `tessera serve` serves them, and
//  - the folder and the file give the same embeddings (bge-small [CLS] and bert-base mean on text, whose
//    WordPiece tokenizer.json and GGUF vocabulary must agree; qwen3-embedding last-token on token ids),
//  - the API's rules hold: encoding_format base64 is the float vector's bytes, `dimensions` truncates and
//    renormalises where the model declares Matryoshka (config.json, or --matryoshka for GGUF) and is a 400
//    elsewhere, errors come in OpenAI's shape (empty input, too long, a bad token id, the wrong model), a pooling
//    node refuses completions and a generate node refuses embeddings, naming the flag, and no KV block is held
//    once answered;
//  - `tessera route` sends embeddings to the pooling node and completions to the generate node of one fleet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::BackgroundProcess;
using testing::tessera_bin;

struct Answer {
  int status = 0;
  json body;
};

Answer post(const std::string& url, const json& body) {
  auto r = http::fetch({.method = "POST",
                        .url = url,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 60000});
  if (!r.ok()) {
    ADD_FAILURE() << url << ": " << r.status().to_string();
    return {};
  }
  return {r->status, json::parse(r->body, nullptr, false)};
}

json get(const std::string& url) {
  auto r = http::fetch({.url = url, .timeout_ms = 10000});
  return r.ok() ? json::parse(r->body, nullptr, false) : json();
}

void synth(const std::string& shape, const std::string& format, const std::string& out,
           std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {tessera_bin(), "synth",  "--shape", shape,   "--small", "--format",
                                   format,        "--seed", "3",       "--out", out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  testing::ProcessResult r = testing::run_process(argv, 120.0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

class Node {
 public:
  // names: --served-model-name's values (the first is the one answers carry).
  explicit Node(std::vector<std::string> args, std::vector<std::string> names = {"m"}) {
    std::vector<std::string> argv = {tessera_bin(),        "serve", "--port", "0", "--backend", "cpu", "--threads", "2",
                                     "--served-model-name"};
    argv.insert(argv.end(), names.begin(), names.end());
    argv.insert(argv.end(), args.begin(), args.end());
    process_ = std::make_unique<BackgroundProcess>(argv);
    const int port = testing::port_from_line(process_->wait_for_line("listening on", 60.0));
    if (port > 0) url_ = "http://127.0.0.1:" + std::to_string(port);
  }
  const std::string& url() const { return url_; }

 private:
  std::unique_ptr<BackgroundProcess> process_;
  std::string url_;
};

std::vector<std::vector<double>> vectors(const json& answer) {
  std::vector<std::vector<double>> out;
  if (answer.is_object() && answer.contains("data"))
    for (const json& d : answer["data"]) out.push_back(d["embedding"].get<std::vector<double>>());
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<float> from_base64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    const int a = val(s[i]), b = val(s[i + 1]), c = val(s[i + 2]), d = val(s[i + 3]);
    bytes.push_back(static_cast<uint8_t>((a << 2) | (b >> 4)));
    if (c >= 0) bytes.push_back(static_cast<uint8_t>(((b & 15) << 4) | (c >> 2)));
    if (d >= 0) bytes.push_back(static_cast<uint8_t>(((c & 3) << 6) | d));
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(bytes[i * 4 + static_cast<size_t>(k)]) << (8 * k);
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

const std::vector<std::string> kTexts = {"hello world", "Embeddings: rankings, retrieval & search!",
                                         "the model reads this sentence again and again"};

TEST(EmbeddingsEndToEnd, HfFolderAndGgufGiveTheSameEmbeddings) {
  const std::string dir = testing::scratch_dir();
  for (const char* shape : {"bge-small", "bert-base"}) {
    SCOPED_TRACE(shape);
    synth(shape, "gguf", dir + "/" + shape + ".gguf");
    synth(shape, "safetensors", dir + "/" + shape + "-hf");
    Node gguf({"--model", dir + "/" + shape + ".gguf"}), hf({"--model", dir + "/" + shape + "-hf"});
    ASSERT_FALSE(gguf.url().empty());
    ASSERT_FALSE(hf.url().empty());
    const json body = {{"model", "m"}, {"input", kTexts}};
    Answer a = post(gguf.url() + "/v1/embeddings", body), b = post(hf.url() + "/v1/embeddings", body);
    ASSERT_EQ(a.status, 200) << a.body.dump();
    ASSERT_EQ(b.status, 200) << b.body.dump();
    EXPECT_EQ(a.body["usage"], b.body["usage"]);
    const auto va = vectors(a.body), vb = vectors(b.body);
    ASSERT_EQ(va.size(), kTexts.size());
    ASSERT_EQ(vb.size(), kTexts.size());
    for (size_t i = 0; i < va.size(); ++i) EXPECT_LT(max_abs_diff(va[i], vb[i]), 1e-6) << "text " << i;
    EXPECT_GT(max_abs_diff(va[0], va[1]), 1e-3);  // different texts, different vectors
  }
  // qwen3-embedding: the HF folder has no tokenizer.json (the synthetic one is llama2.c's), so token ids.
  synth("qwen3-embedding-0.6b", "gguf", dir + "/q.gguf");
  synth("qwen3-embedding-0.6b", "safetensors", dir + "/q-hf", {"--tokenizer-out", dir + "/q.tok"});
  Node gguf({"--model", dir + "/q.gguf"}), hf({"--model", dir + "/q-hf", "--tokenizer", dir + "/q.tok"});
  ASSERT_FALSE(gguf.url().empty());
  ASSERT_FALSE(hf.url().empty());
  const json body = {{"model", "m"}, {"input", json::array({{5, 300, 7, 2}, {400, 401, 402, 403, 404, 2}})}};
  Answer a = post(gguf.url() + "/v1/embeddings", body), b = post(hf.url() + "/v1/embeddings", body);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_EQ(b.status, 200) << b.body.dump();
  const auto va = vectors(a.body), vb = vectors(b.body);
  ASSERT_EQ(va.size(), 2u);
  ASSERT_EQ(vb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_LT(max_abs_diff(va[i], vb[i]), 1e-6) << "input " << i;
}

TEST(EmbeddingsEndToEnd, ApiRulesErrorsAndRunners) {
  const std::string dir = testing::scratch_dir();
  synth("qwen3-embedding-0.6b", "safetensors", dir + "/q-hf", {"--tokenizer-out", dir + "/q.tok"});
  synth("qwen3-embedding-0.6b", "gguf", dir + "/q.gguf");
  synth("bge-small", "gguf", dir + "/bge.gguf");
  Node q({"--model", dir + "/q-hf", "--tokenizer", dir + "/q.tok"}),
      bge({"--model", dir + "/bge.gguf"}, {"m", "bge-alias"});
  ASSERT_FALSE(q.url().empty());
  ASSERT_FALSE(bge.url().empty());
  EXPECT_EQ(get(q.url() + "/health")["runner"], "pooling");

  // Float and base64 answers carry the same vector; usage counts every input's tokens.
  Answer f = post(q.url() + "/v1/embeddings", {{"model", "m"}, {"input", "hello there"}});
  Answer b64 =
      post(q.url() + "/v1/embeddings", {{"model", "m"}, {"input", "hello there"}, {"encoding_format", "base64"}});
  ASSERT_EQ(f.status, 200) << f.body.dump();
  ASSERT_EQ(b64.status, 200) << b64.body.dump();
  EXPECT_EQ(f.body["object"], "list");
  EXPECT_EQ(f.body["model"], "m");
  EXPECT_GT(f.body["usage"]["prompt_tokens"].get<int>(), 1);
  const std::vector<double> full = vectors(f.body)[0];
  ASSERT_EQ(full.size(), 64u);
  const std::vector<float> decoded = from_base64(b64.body["data"][0]["embedding"].get<std::string>());
  ASSERT_EQ(decoded.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(decoded[i], static_cast<float>(full[i])) << i;
  double norm = 0;
  for (double x : full) norm += x * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);  // sentence-transformers' Normalize module

  // dimensions: the first 16 values, renormalised (the HF folder declares Matryoshka in config.json).
  Answer d = post(q.url() + "/v1/embeddings", {{"model", "m"}, {"input", "hello there"}, {"dimensions", 16}});
  ASSERT_EQ(d.status, 200) << d.body.dump();
  const std::vector<double> short_v = vectors(d.body)[0];
  ASSERT_EQ(short_v.size(), 16u);
  double head = 0;
  for (size_t i = 0; i < 16; ++i) head += full[i] * full[i];
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(short_v[i], full[i] / std::sqrt(head), 1e-6);
  EXPECT_EQ(post(q.url() + "/v1/embeddings", {{"model", "m"}, {"input", "x"}, {"dimensions", 65}}).status, 400);

  // A GGUF file cannot declare Matryoshka: 400 naming the flag, fine with --matryoshka.
  Answer no = post(bge.url() + "/v1/embeddings", {{"model", "m"}, {"input", "x"}, {"dimensions", 8}});
  EXPECT_EQ(no.status, 400);
  EXPECT_EQ(no.body["error"]["param"], "dimensions");
  EXPECT_NE(no.body["error"]["message"].get<std::string>().find("--matryoshka"), std::string::npos);
  Node qm({"--model", dir + "/q.gguf", "--matryoshka"});
  ASSERT_FALSE(qm.url().empty());
  EXPECT_EQ(
      vectors(post(qm.url() + "/v1/embeddings", {{"model", "m"}, {"input", "x"}, {"dimensions", 8}}).body)[0].size(),
      8u);

  // Errors in OpenAI's shape.
  struct Bad {
    json body;
    int status;
    const char* param;
  };
  std::string too_long;
  for (int i = 0; i < 200; ++i) too_long += "many words here ";
  for (const Bad& c : {Bad{{{"model", "m"}, {"input", ""}}, 400, "input"},
                       Bad{{{"model", "m"}, {"input", json::array()}}, 400, "input"},
                       Bad{{{"model", "m"}, {"input", too_long}}, 400, "input"},
                       Bad{{{"model", "m"}, {"input", {1, 2, 100000}}}, 400, "input"},
                       Bad{{{"model", "other"}, {"input", "x"}}, 404, "model"}, Bad{{{"input", "x"}}, 400, "model"}}) {
    Answer a = post(bge.url() + "/v1/embeddings", c.body);
    EXPECT_EQ(a.status, c.status) << c.body.dump() << " -> " << a.body.dump();
    ASSERT_TRUE(a.body.is_object() && a.body.contains("error")) << a.body.dump();
    EXPECT_EQ(a.body["error"]["param"], c.param) << a.body.dump();
    EXPECT_EQ(a.body["error"]["type"], "invalid_request_error");
  }
  EXPECT_EQ(post(bge.url() + "/v1/embeddings", {{"model", "m"}, {"input", too_long}}).body["error"]["code"],
            "context_length_exceeded");

  // A pooling node refuses text; a generate node refuses embeddings; each names what to do.
  Answer c = post(bge.url() + "/v1/completions", {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 2}});
  EXPECT_EQ(c.status, 400);
  EXPECT_NE(c.body["error"]["message"].get<std::string>().find("/v1/embeddings"), std::string::npos);
  Node gen({"--model", dir + "/q.gguf", "--runner", "generate"});
  ASSERT_FALSE(gen.url().empty());
  EXPECT_EQ(get(gen.url() + "/health")["runner"], "generate");
  Answer e = post(gen.url() + "/v1/embeddings", {{"model", "m"}, {"input", "x"}});
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.body["error"]["message"].get<std::string>().find("--embeddings"), std::string::npos);
  EXPECT_EQ(post(gen.url() + "/v1/completions", {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 2}}).status, 200);

  // Every --served-model-name is accepted; the answer carries the first.
  Answer alias = post(bge.url() + "/v1/embeddings", {{"model", "bge-alias"}, {"input", "x"}});
  EXPECT_EQ(alias.status, 200) << alias.body.dump();
  EXPECT_EQ(alias.body["model"], "m");

  // Nothing is held once answered.
  for (const Node* n : {&q, &bge}) {
    const json h = get(n->url() + "/health");
    EXPECT_EQ(h["kv_blocks_used"], 0) << h.dump();
  }
}

TEST(EmbeddingsEndToEnd, RouterSendsEachKindToItsRunner) {
  const std::string dir = testing::scratch_dir();
  synth("qwen3-embedding-0.6b", "gguf", dir + "/q.gguf");
  Node pooling({"--model", dir + "/q.gguf"}), generate({"--model", dir + "/q.gguf", "--runner", "generate"});
  ASSERT_FALSE(pooling.url().empty());
  ASSERT_FALSE(generate.url().empty());
  BackgroundProcess router({tessera_bin(), "route", "--port", "0", "--nodes", pooling.url() + "," + generate.url(),
                            "--strategy", "round_robin"});
  const int port = testing::port_from_line(router.wait_for_line("listening on", 60.0));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  // The router learns each node's runner from its /health probes (GET /admin/nodes shows it).
  bool known = false;
  for (int i = 0; i < 100 && !known; ++i) {
    const json nodes = get(url + "/admin/nodes");
    int runners = 0;
    if (nodes.is_object() && nodes.contains("nodes"))
      for (const json& n : nodes["nodes"]) runners += n.value("runner", "") != "" ? 1 : 0;
    known = runners == 2;
    if (!known) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(known) << get(url + "/admin/nodes").dump();
  // Round robin over two nodes, yet every request lands where it is served.
  for (int i = 0; i < 6; ++i) {
    Answer e = post(url + "/v1/embeddings", {{"model", "m"}, {"input", {"a", "b"}}});
    EXPECT_EQ(e.status, 200) << e.body.dump();
    EXPECT_EQ(vectors(e.body).size(), 2u);
    Answer c = post(url + "/v1/completions", {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 2}});
    EXPECT_EQ(c.status, 200) << c.body.dump();
  }
}

}  // namespace
}  // namespace tessera
