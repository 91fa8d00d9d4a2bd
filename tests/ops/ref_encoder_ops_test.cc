// The reference encoder operators (layer_norm, activation, attention_noncausal, pool) on small cases worked out
// by hand (values in comments), and validate()'s refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/backend.h"
#include "ops/registry.h"
#include "support/ref_device_test.h"

namespace tessera::ops {
namespace {

class RefEncoderOps : public testing::RefDeviceTest {};

TEST_F(RefEncoderOps, LayerNormCentresScalesAndShifts) {
  // Row [1, 2, 3, 4]: mean 2.5, population variance 1.25, 1/sqrt(1.25) = 0.894427.
  // Normalised: [-1.341641, -0.447214, 0.447214, 1.341641]; times w [1, 2, 1, 0.5], plus b [0, 1, -1, 0.25].
  // Row [5, 5, 5, 5]: variance 0 -> all zeros before the bias (eps keeps it finite).
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 5, 5, 5, 5});
  Tensor w = f32({4}, {1, 2, 1, 0.5f});
  Tensor b = f32({4}, {0, 1, -1, 0.25f});
  Tensor out = f32({2, 4}, std::vector<float>(8, 9.0f));
  ASSERT_TRUE(stream_->run(LayerNormOp{x, w, b, out, 1e-12f}).ok());
  expect_near(get(out), {-1.341641f, 0.105573f, -0.552786f, 0.920820f, 0, 1, -1, 0.25f});
  // Without bias, in place.
  ASSERT_TRUE(stream_->run(LayerNormOp{x, w, Tensor(), x, 1e-12f}).ok());
  expect_near(get(x), {-1.341641f, -0.894427f, 0.447214f, 0.670820f, 0, 0, 0, 0});
}

TEST_F(RefEncoderOps, ActivationsMatchTheirFormulas) {
  // gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)): gelu(1) = 0.841345, gelu(-1) = -0.158655, gelu(3) = 2.995950.
  Tensor x = f32({1, 4}, {0.0f, 1.0f, -1.0f, 3.0f});
  Tensor out = f32({1, 4}, {0, 0, 0, 0});
  ASSERT_TRUE(stream_->run(ActivationOp{x, out, Activation::kGeluErf}).ok());
  expect_near(get(out), {0.0f, 0.841345f, -0.158655f, 2.995950f});
  // tanh form: gelu_tanh(1) = 0.841192, gelu_tanh(-1) = -0.158808, gelu_tanh(3) = 2.996363.
  ASSERT_TRUE(stream_->run(ActivationOp{x, out, Activation::kGeluTanh}).ok());
  expect_near(get(out), {0.0f, 0.841192f, -0.158808f, 2.996363f});
  // silu(1) = 1 / (1 + e^-1) = 0.731059, silu(-1) = -0.268941, silu(3) = 2.857722.
  ASSERT_TRUE(stream_->run(ActivationOp{x, out, Activation::kSilu}).ok());
  expect_near(get(out), {0.0f, 0.731059f, -0.268941f, 2.857722f});
}

TEST_F(RefEncoderOps, NonCausalAttentionSeesLaterTokens) {
  // Two tokens, one head of 2 dims, scale 1 (scale > 0 replaces 1/sqrt(2)). q0 = [1, 0], q1 = [0, 0];
  // k0 = [1, 0], k1 = [0, 1]; v0 = [1, 2], v1 = [3, 4].
  // Token 0: scores [1, 0] -> p = [e/(e+1), 1/(e+1)] = [0.731059, 0.268941]: out = [1.537883, 2.537883]. A causal
  // attention would give token 0 exactly v0 = [1, 2]: the later token counts.
  // Token 1: scores [0, 0] -> p = [0.5, 0.5]: out = [2, 3].
  Tensor q = f32({2, 1, 2}, {1, 0, 0, 0});
  Tensor k = f32({2, 1, 2}, {1, 0, 0, 1});
  Tensor v = f32({2, 1, 2}, {1, 2, 3, 4});
  Tensor out = f32({2, 1, 2}, {0, 0, 0, 0});
  ASSERT_TRUE(stream_->run(AttentionNonCausalOp{q, k, v, out, 1.0f}).ok());
  expect_near(get(out), {1.537883f, 2.537883f, 2.0f, 3.0f});
  // Two query heads share the one kv head (grouped-query); default scale 1/sqrt(2): token 0, head 1 has
  // q = [0, 2]: scores [0, 2/sqrt2 = 1.414214] -> p = [0.195570, 0.804430] -> out = [2.608859, 3.608859].
  Tensor q2 = f32({2, 2, 2}, {1, 0, 0, 2, 0, 0, 0, 0});
  Tensor out2 = f32({2, 2, 2}, std::vector<float>(8, 0.0f));
  ASSERT_TRUE(stream_->run(AttentionNonCausalOp{q2, k, v, out2}).ok());
  std::vector<float> got = get(out2);
  EXPECT_NEAR(got[2], 2.608859f, 1e-5f);
  EXPECT_NEAR(got[3], 3.608859f, 1e-5f);
  EXPECT_NEAR(got[4], 2.0f, 1e-6f);
}

TEST_F(RefEncoderOps, PoolingTakesMeanFirstOrLast) {
  Tensor x = f32({3, 2}, {1, 10, 2, 20, 6, 60});
  Tensor out = f32({1, 2}, {0, 0});
  ASSERT_TRUE(stream_->run(PoolOp{x, out, PoolKind::kMean}).ok());
  expect_near(get(out), {3, 30});
  ASSERT_TRUE(stream_->run(PoolOp{x, out, PoolKind::kFirst}).ok());
  expect_near(get(out), {1, 10});
  ASSERT_TRUE(stream_->run(PoolOp{x, out, PoolKind::kLast}).ok());
  expect_near(get(out), {6, 60});
}

TEST_F(RefEncoderOps, ValidateRefusesBadShapes) {
  Tensor x = f32({2, 4}, std::vector<float>(8, 1.0f));
  Tensor w3 = f32({3}, {1, 1, 1});
  EXPECT_EQ(stream_->run(LayerNormOp{x, w3, Tensor(), x}).code(), StatusCode::kInvalidArgument);
  Tensor wide = f32({1, 4}, std::vector<float>(4, 0.0f));
  EXPECT_EQ(stream_->run(PoolOp{x, f32({1, 3}, {0, 0, 0}), PoolKind::kMean}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream_->run(PoolOp{x, wide, PoolKind::kMean}).ok());
  Tensor q = f32({2, 3, 2}, std::vector<float>(12, 0.0f));
  Tensor k = f32({2, 2, 2}, std::vector<float>(8, 0.0f));
  Status st = stream_->run(AttentionNonCausalOp{q, k, k, q});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("multiple of kv heads"), std::string::npos) << st.message();
  // silu_mul keeps to its gated activations.
  EXPECT_EQ(stream_->run(SiluMulOp{x, x, x, Activation::kGeluErf}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::ops
