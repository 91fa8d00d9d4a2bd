// Latency-model fitting and datasheet profiles.
#include <gtest/gtest.h>

#include "base/rng.h"
#include "model/synth.h"
#include "solver/profile.h"
#include "solver/spec_yaml.h"

namespace tessera::solver {
namespace {

ModelCost cost110m() { return ModelCost::from_config(*model::synth_shape("stories110M"), 4, 4); }

void synth_points(const ModelCost& c, const LatencyModel& truth, double noise, std::vector<PrefillPoint>* pf,
                  std::vector<DecodePoint>* dc) {
  Rng rng(7);
  for (int t : {16, 64, 256, 1024})
    for (int b : {1, 4}) {
      double s = step_seconds(truth, step_work(c, prefill_shape(c, t, b)), 1, 0, c);
      pf->push_back({t, b, s * (1 + noise * (2 * rng.next_f32() - 1))});
    }
  for (int b : {1, 8, 32, 128})
    for (int ctx : {64, 512}) {
      double s = step_seconds(truth, step_work(c, decode_shape(b, ctx)), 1, 0, c);
      dc->push_back({b, ctx, s * (1 + noise * (2 * rng.next_f32() - 1))});
    }
}

TEST(Profile, FitRecoversAKnownRoofline) {
  ModelCost c = cost110m();
  LatencyModel truth{0.0005, 2e11, 5e10};
  std::vector<PrefillPoint> pf;
  std::vector<DecodePoint> dc;
  synth_points(c, truth, 0, &pf, &dc);
  auto fit = fit_latency_model(c, pf, dc);
  ASSERT_TRUE(fit.ok()) << fit.status().to_string();
  EXPECT_NEAR(fit->first.flops_per_s / truth.flops_per_s, 1.0, 0.01);
  EXPECT_NEAR(fit->first.bytes_per_s / truth.bytes_per_s, 1.0, 0.01);
  EXPECT_NEAR(fit->first.overhead_s, truth.overhead_s, 5e-5);
  EXPECT_EQ(fit->second.points, 16);
  EXPECT_LT(fit->second.max_abs_rel, 0.01);
}

TEST(Profile, FitErrorReflectsNoise) {
  ModelCost c = cost110m();
  std::vector<PrefillPoint> pf;
  std::vector<DecodePoint> dc;
  synth_points(c, {0.0005, 2e11, 5e10}, 0.10, &pf, &dc);
  auto fit = fit_latency_model(c, pf, dc);
  ASSERT_TRUE(fit.ok());
  EXPECT_GT(fit->second.mean_abs_rel, 0.005);  // +-10% noise cannot be fitted away
  EXPECT_LT(fit->second.mean_abs_rel, 0.10);
  EXPECT_LE(fit->second.mean_abs_rel, fit->second.max_abs_rel);
}

TEST(Profile, FitRecoversAnAdditiveModel) {
  // A backend that neither overlaps memory with compute nor runs attention at matmul speed.
  ModelCost c = cost110m();
  LatencyModel truth{0.0002, 4e10, 3e10, LatencyKind::kAdditive, 5e9};
  std::vector<PrefillPoint> pf;
  std::vector<DecodePoint> dc;
  synth_points(c, truth, 0, &pf, &dc);
  auto fit = fit_latency_model(c, pf, dc);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first.kind, LatencyKind::kAdditive);
  EXPECT_NEAR(fit->first.flops_per_s / truth.flops_per_s, 1.0, 1e-6);
  EXPECT_NEAR(fit->first.attention_flops_per_s / truth.attention_flops_per_s, 1.0, 1e-6);
  EXPECT_NEAR(fit->first.bytes_per_s / truth.bytes_per_s, 1.0, 1e-6);
  EXPECT_NEAR(fit->first.overhead_s, truth.overhead_s, 1e-9);
  EXPECT_LT(fit->second.max_abs_rel, 1e-6);
  // A roofline stays a roofline.
  std::vector<PrefillPoint> pf2;
  std::vector<DecodePoint> dc2;
  synth_points(c, {0.0005, 2e11, 5e10}, 0, &pf2, &dc2);
  EXPECT_EQ(fit_latency_model(c, pf2, dc2)->first.kind, LatencyKind::kRoofline);
  // Round trip through the profile file, and a bad kind.
  DeviceProfile p;
  p.family = "scalar";
  p.source = "measured";
  p.memory_bytes = 1e9;
  p.network_bandwidth = 1e9;
  p.latency = fit->first;
  auto back = parse_profile(profile_to_yaml(p), "additive");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->latency.kind, LatencyKind::kAdditive);
  EXPECT_NEAR(back->latency.attention_flops_per_s / p.latency.attention_flops_per_s, 1, 1e-8);
  auto bad = parse_profile(
      "family: x\nsource: measured\nmemory_gb: 1\nnetwork_gb_s: 1\nlatency: {kind: magic, overhead_ms: 0, "
      "flops_per_s: 1, bytes_per_s: 1}\n",
      "bad");
  EXPECT_NE(bad.status().message().find("known: roofline, additive"), std::string::npos);
}

TEST(Profile, FitRejectsBadPoints) {
  ModelCost c = cost110m();
  EXPECT_EQ(fit_latency_model(c, {{16, 1, 0.01}}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fit_latency_model(c, {{16, 1, 0.01}, {0, 1, 0.01}, {32, 1, 0.02}}, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(fit_latency_model(c, {{16, 1, 0.01}, {32, 1, 0.02}}, {{1, 8, -1.0}}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Profile, DecodeStepsInterpolateTheMeasuredPoints) {
  // A grid with a step change at batch 4 (as the cpu backend has), which no roofline follows.
  std::vector<DecodePoint> pts = {{1, 8, 0.003},   {2, 8, 0.003},   {4, 8, 0.006},
                                  {1, 128, 0.004}, {2, 128, 0.004}, {4, 128, 0.008}};
  auto at = [&](double b, double c) { return *interpolate_decode(pts, b, c); };
  EXPECT_NEAR(at(4, 8), 0.006, 1e-15) << "exact at a measured point";
  EXPECT_NEAR(at(3, 8), 0.0045, 1e-15) << "linear in batch between points";
  EXPECT_NEAR(at(4, 68), 0.007, 1e-15) << "linear in context between the measured contexts";
  EXPECT_NEAR(at(6, 8), 0.009, 1e-15) << "the last batch segment extends";
  EXPECT_NEAR(at(2, 4), 0.003 - 0.001 * 4 / 120, 1e-15) << "the first context segment extends below";
  EXPECT_GE(at(1, 0.0), 0.0);
  EXPECT_FALSE(interpolate_decode({}, 1, 8).ok());
}

TEST(Profile, PrefillStepsInterpolateTheSinglePromptPoints) {
  std::vector<PrefillPoint> pts = {{128, 1, 0.030}, {8, 1, 0.005}, {255, 1, 0.060}, {64, 4, 0.5}};
  auto at = [&](double t) { return *interpolate_prefill(pts, t); };
  EXPECT_NEAR(at(128), 0.030, 1e-15) << "exact at a measured point (unsorted input)";
  EXPECT_NEAR(at(68), 0.005 + 0.025 * 60 / 120, 1e-15) << "linear between points; batch-4 points ignored";
  EXPECT_NEAR(at(300), 0.060 + 0.030 * 45 / 127, 1e-15) << "the last segment extends";
  EXPECT_GE(at(0), 0.0);
  EXPECT_FALSE(interpolate_prefill({}, 8).ok());
  EXPECT_FALSE(interpolate_prefill({{64, 4, 0.5}}, 8).ok()) << "only single-prompt points count";
}

TEST(Profile, DatasheetAppliesEfficiencies) {
  Datasheet d;
  d.peak_flops = 989e12;
  d.memory_bandwidth = 3.35e12;
  d.memory_bytes = 80e9;
  d.network_bandwidth = 50e9;
  d.flops_efficiency = 0.5;
  d.bandwidth_efficiency = 0.8;
  ASSERT_TRUE(validate_datasheet(d).ok());
  DeviceProfile p = profile_from_datasheet("h100", d);
  EXPECT_EQ(p.source, "datasheet");
  EXPECT_DOUBLE_EQ(p.latency.flops_per_s, 494.5e12);
  EXPECT_DOUBLE_EQ(p.latency.bytes_per_s, 2.68e12);
  EXPECT_TRUE(p.validate().ok());
  d.flops_efficiency = 1.5;
  EXPECT_FALSE(validate_datasheet(d).ok());
}

TEST(Profile, YamlRoundTrip) {
  ModelCost c = cost110m();
  DeviceProfile p;
  p.family = "cpu-avx2";
  p.source = "measured";
  p.model = "stories110M";
  p.memory_bytes = 16e9;
  p.network_bandwidth = 2e9;
  p.kv_bytes_per_token = c.kv_bytes_per_token;
  synth_points(c, {0.0005, 2e11, 5e10}, 0.02, &p.prefill, &p.decode);
  auto fit = fit_latency_model(c, p.prefill, p.decode);
  ASSERT_TRUE(fit.ok());
  p.latency = fit->first;
  p.fit = fit->second;
  auto back = parse_profile(profile_to_yaml(p), "roundtrip");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->family, p.family);
  EXPECT_EQ(back->model, p.model);
  EXPECT_EQ(back->prefill.size(), p.prefill.size());
  EXPECT_EQ(back->decode.size(), p.decode.size());
  EXPECT_NEAR(back->latency.flops_per_s / p.latency.flops_per_s, 1, 1e-5);
  EXPECT_NEAR(back->latency.overhead_s, p.latency.overhead_s, 1e-12);
  EXPECT_NEAR(back->fit.mean_abs_rel, p.fit.mean_abs_rel, 1e-6);
  EXPECT_NEAR(back->decode[3].seconds / p.decode[3].seconds, 1, 1e-8);
}

}  // namespace
}  // namespace tessera::solver
