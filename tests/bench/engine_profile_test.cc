// The measurements behind `tessera profile` (src/bench/engine_profile.h), on `ref` with stories260K: the
// points asked for are the points taken, the pauses are taken between runs, and a given link rate is kept.
#include "bench/engine_profile.h"

#include <gtest/gtest.h>

#include "model/synth.h"
#include "model/synth_gemma4.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::bench {
namespace {

TEST(EngineProfile, OptionsOutOfRangeAreRefusedByFlagName) {
  EngineProfileOptions o;
  EXPECT_TRUE(check_engine_profile_options(o).ok());
  o.statistic = "mean";
  Status s = check_engine_profile_options(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--statistic 'mean'"), std::string::npos) << s.message();
  o.statistic = "median";
  o.max_tokens = 4;
  EXPECT_FALSE(check_engine_profile_options(o).ok());
}

TEST(EngineProfile, MeasuresThePointsAskedForAndFitsThem) {
  TS_REQUIRE_STORIES260K();
  ops::register_builtin_backends();
  auto device = ops::open_device("ref");
  ASSERT_TRUE(device.ok());
  auto model = model::load_model(testing::stories260k_dir());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EngineProfileOptions o;
  o.max_tokens = 32;
  o.max_batch = 2;
  o.repeats = 1;
  int pauses = 0;
  o.pause = [&](double seconds) {
    EXPECT_GE(seconds, 0);
    ++pauses;
  };
  solver::DeviceProfile p;
  p.family = "ref";
  Status s = measure_engine_profile(**device, *model, o, p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(p.source, "measured");
  EXPECT_EQ(p.model, "stories260K");
  EXPECT_EQ(p.family, "ref") << "the caller's";
  EXPECT_GT(p.kv_bytes_per_token, 0);
  ASSERT_EQ(p.prefill.size(), 3u);  // 8, 16, 32 tokens
  EXPECT_EQ(p.prefill[2].tokens, 32);
  ASSERT_EQ(p.decode.size(), 4u);  // batch 1, 2 x context 8, 32
  EXPECT_EQ(p.decode[1].batch, 1);
  EXPECT_EQ(p.decode[1].context, 32);
  EXPECT_EQ(p.decode[3].batch, 2);
  for (const auto& d : p.decode) EXPECT_GT(d.seconds, 0);
  EXPECT_GT(p.network_bandwidth, 1e6) << "the same-host KV hand-off, through host memory";
  EXPECT_EQ(pauses, 3 + 4 + 3) << "after each prefill run, each decode point, each hand-off run";
  EXPECT_EQ(p.fit.points, 7);

  o.network_gb_s = 2;
  pauses = 0;
  ASSERT_TRUE(measure_engine_profile(**device, *model, o, p).ok());
  EXPECT_EQ(p.network_bandwidth, 2e9);
  EXPECT_EQ(p.prefill.size(), 3u) << "points replaced, not appended";
  EXPECT_EQ(pauses, 3 + 4);
}

// The KV cache holds what the points use, not max_batch sequences of the model's whole context: stories260K made to
// record a context of 4M positions would otherwise need 8 x 4M x 1280 bytes (43 GB) of f32 KV.
TEST(EngineProfile, SizesTheCacheToItsPointsNotToTheModelsContext) {
  TS_REQUIRE_STORIES260K();
  ops::register_builtin_backends();
  auto device = ops::open_device("ref");
  ASSERT_TRUE(device.ok());
  auto model = model::load_model(testing::stories260k_dir());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  model->config.max_seq_len = 1 << 22;
  EngineProfileOptions o;
  o.max_tokens = 16;
  o.max_batch = 8;
  o.repeats = 1;
  o.network_gb_s = 1;
  o.pause = [](double) {};
  solver::DeviceProfile p;
  Status s = measure_engine_profile(**device, *model, o, p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(p.decode.back().batch, 8);
}

// A hybrid model's hand-off carries its full-attention layers' K and V and its recurrent state, a gemma4 model's the
// layers that keep K and V of their own (as the engine's KV connectors do); both are measured.
TEST(EngineProfile, MeasuresTheHandOffOfHybridAndGemma4Models) {
  ops::register_builtin_backends();
  auto device = ops::open_device("cpu");
  ASSERT_TRUE(device.ok());
  model::ModelConfig hc = *model::synth_shape_small("qwen3.5-0.8b");
  hc.n_layers = 4;  // linear and full-attention layers
  model::SynthModel hybrid = model::synthesize_weights(hc, 3);
  model::LoadedModel h;
  h.name = "qwen35-small";
  h.config = hybrid.config;
  h.weights = std::move(hybrid.weights);
  EngineProfileOptions o;
  o.max_tokens = 16;
  o.max_batch = 2;
  o.repeats = 1;
  o.pause = [](double) {};
  solver::DeviceProfile p;
  Status s = measure_engine_profile(**device, h, o, p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_GT(p.network_bandwidth, 1e6);
  const int full = hc.n_layers - hc.linear_layer_count();
  ASSERT_GT(hc.linear_layer_count(), 0);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 2.0 * hc.kv_dim() * 2 * full) << "the full layers' K and V, f16";
  o.prefill_export = true;  // each layer exported as a prefill node streams it
  s = measure_engine_profile(**device, h, o, p);
  ASSERT_TRUE(s.ok()) << s.to_string();

  auto shape = model::gemma4_shape("gemma4-e2b", /*small=*/true);
  ASSERT_TRUE(shape.ok());
  const std::string path = testing::scratch_dir() + "/g4.gguf";
  ASSERT_TRUE(model::write_gemma4_gguf(*shape, 3, {}, path).ok());
  auto g = model::load_model(path, "", /*require_tokenizer=*/false);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  for (bool prefill_export : {false, true}) {
    o.prefill_export = prefill_export;
    s = measure_engine_profile(**device, *g, o, p);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_GT(p.network_bandwidth, 1e6);
  }
}

}  // namespace
}  // namespace tessera::bench
