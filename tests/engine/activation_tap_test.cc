// RunnerOptions::activation_tap and its file writer (engine/activation_dump.h): every named point of every
// layer, in order, with the step's rows; watching does not change the numbers; the last hidden state it hands
// over is the one the classifier reads.
#include "engine/activation_dump.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

struct Seen {
  std::string name;
  int layer;
  int64_t rows, cols;
  std::vector<float> values;
};

class Tap : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ops::open_device("ref");
    ASSERT_TRUE(d.ok());
    device_ = std::move(d).value();
    auto c = model::synth_shape("tiny");
    c->n_layers = 2;
    c->max_seq_len = 64;
    model_ = model::synthesize_weights(*c, 3);
  }
  std::unique_ptr<ModelRunner> make(engine::ActivationTap tap) {
    RunnerOptions o;
    o.max_batch_tokens = 32;
    o.activation_tap = std::move(tap);
    auto r = ModelRunner::create(*device_, model_.config, model_.weights, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(r).value();
  }
  std::unique_ptr<ops::Device> device_;
  model::SynthModel model_;
  std::vector<TokenId> prompt_ = {1, 300, 42, 7, 511, 260, 99};
};

TEST_F(Tap, HandsOverEveryPointOfEveryLayerWithoutChangingTheLogits) {
  std::vector<Seen> seen;
  auto watched = make([&](std::string_view name, int layer, int64_t rows, std::span<const float> v) {
    seen.push_back({std::string(name), layer, rows, static_cast<int64_t>(v.size()) / rows, {v.begin(), v.end()}});
  });
  std::vector<float> with_tap, without_tap;
  SequenceKv s1, s2;
  ASSERT_TRUE(watched->prefill(s1, prompt_, with_tap).ok());
  auto plain = make(nullptr);
  ASSERT_TRUE(plain->prefill(s2, prompt_, without_tap).ok());
  EXPECT_EQ(with_tap, without_tap);

  const model::ModelConfig& c = model_.config;
  const std::vector<std::pair<std::string, int64_t>> points = {
      {"attn_norm", c.dim}, {"Qcur", c.q_dim()}, {"Kcur", c.kv_dim()}, {"Vcur", c.kv_dim()}, {"kqv_out", c.q_dim()},
      {"ffn_inp", c.dim},   {"ffn_norm", c.dim}, {"ffn_out", c.dim},   {"l_out", c.dim}};
  ASSERT_EQ(seen.size(), points.size() * c.n_layers + 1);
  for (int l = 0; l < c.n_layers; ++l) {
    for (size_t p = 0; p < points.size(); ++p) {
      const Seen& s = seen[l * points.size() + p];
      EXPECT_EQ(s.name, points[p].first);
      EXPECT_EQ(s.layer, l);
      EXPECT_EQ(s.rows, static_cast<int64_t>(prompt_.size()));
      EXPECT_EQ(s.cols, points[p].second) << s.name;
    }
  }
  // The final hidden state: the classifier (the tied embedding here) times its last row gives the logits.
  const Seen& last = seen.back();
  ASSERT_EQ(last.name, "result_norm");
  EXPECT_EQ(last.layer, -1);
  ASSERT_TRUE(c.tied_embeddings);
  const auto* e = reinterpret_cast<const float*>(model_.weights.find("token_embd.weight")->data);
  const float* h = last.values.data() + (last.rows - 1) * c.dim;
  for (int v : {0, 7, 300, c.vocab_size - 1}) {
    double z = 0;
    for (int k = 0; k < c.dim; ++k) z += static_cast<double>(e[static_cast<size_t>(v) * c.dim + k]) * h[k];
    EXPECT_NEAR(z, with_tap[v], 1e-4) << "token " << v;
  }
  // The residual stream grows by each layer's writes: l_out of the last layer is ffn_inp plus ffn_out.
  const Seen& inp = seen[(c.n_layers - 1) * points.size() + 5];
  const Seen& out = seen[(c.n_layers - 1) * points.size() + 7];
  const Seen& lout = seen[(c.n_layers - 1) * points.size() + 8];
  for (size_t i = 0; i < lout.values.size(); i += 37) EXPECT_NEAR(lout.values[i], inp.values[i] + out.values[i], 1e-5);
}

TEST_F(Tap, FileDumpWritesEachCallAsRowsOfFloats) {
  const std::string dir = testing::scratch_dir() + "/dump";
  std::vector<Seen> seen;
  engine::ActivationTap files = activation_file_dump(dir);
  auto r = make([&](std::string_view name, int layer, int64_t rows, std::span<const float> v) {
    seen.push_back({std::string(name), layer, rows, static_cast<int64_t>(v.size()) / rows, {v.begin(), v.end()}});
    files(name, layer, rows, v);
  });
  SequenceKv s;
  std::vector<float> logits;
  ASSERT_TRUE(r->prefill(s, prompt_, logits).ok());
  SequenceKv* seqs[] = {&s};
  const TokenId next = 5;
  ASSERT_TRUE(r->decode(seqs, std::span(&next, 1), logits).ok());
  // The prefill's Qcur of layer 1 is call 0 of that point, the decode step's call 1.
  for (int k = 0; k < 2; ++k) {
    const std::string path = dir + "/Qcur-1." + std::to_string(k) + ".f32";
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr) << path;
    int64_t header[2] = {};
    ASSERT_EQ(std::fread(header, sizeof header, 1, f), 1u);
    std::vector<float> values(static_cast<size_t>(header[0] * header[1]));
    EXPECT_EQ(std::fread(values.data(), sizeof(float), values.size(), f), values.size());
    EXPECT_EQ(std::fgetc(f), EOF);
    std::fclose(f);
    const Seen* want = nullptr;
    int calls = 0;
    for (const Seen& x : seen) {
      if (x.name == "Qcur" && x.layer == 1 && calls++ == k) want = &x;
    }
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(header[0], k == 0 ? static_cast<int64_t>(prompt_.size()) : 1);
    EXPECT_EQ(header[1], model_.config.q_dim());
    EXPECT_EQ(values, want->values);
  }
  std::FILE* out = std::fopen((dir + "/result_norm-out.1.f32").c_str(), "rb");
  EXPECT_NE(out, nullptr) << "the last layer's point is named 'out'";
  if (out != nullptr) std::fclose(out);
}

}  // namespace
}  // namespace tessera::engine
