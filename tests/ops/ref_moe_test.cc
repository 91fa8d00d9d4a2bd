// The reference mixture-of-experts operators on cases worked out by hand (values in comments): each gating
// function's choice and weights, ties, the selection bias, and one token through two experts by every form
// (separate gate/up, fused gate_up, biases with gpt-oss's clamped SwiGLU).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/backend.h"
#include "ops/registry.h"
#include "support/ref_device_test.h"

namespace tessera::ops {
namespace {

class RefMoe : public testing::RefDeviceTest {
 protected:
  // Routes logits [1, E] to k experts; returns (ids, weights).
  std::pair<std::vector<int32_t>, std::vector<float>> route(const std::vector<float>& logits, int k, MoeGating g,
                                                            bool normalize, const std::vector<float>& bias = {},
                                                            float scale = 1.0f,
                                                            const std::vector<float>& expert_scale = {}) {
    const auto e = static_cast<int64_t>(logits.size());
    MoeRouteOp op{f32({1, e}, logits), i32({1, k}, std::vector<int32_t>(static_cast<size_t>(k))),
                  f32({1, k}, std::vector<float>(static_cast<size_t>(k)))};
    if (!bias.empty()) op.bias = f32({e}, bias);
    if (!expert_scale.empty()) op.expert_scale = f32({e}, expert_scale);
    op.gating = g;
    op.normalize = normalize;
    op.scale = scale;
    EXPECT_TRUE(stream_->run(op).ok());
    return {get<int32_t>(op.ids), get(op.weights)};
  }
};

TEST_F(RefMoe, SoftmaxTopKWithAndWithoutRenormalisation) {
  // softmax(1, 3, 2, 0): e^3 / (1 + e + e^2 + e^3) = 0.64391, e^2 / ... = 0.23688; renormalised over the two:
  // 1 / (1 + e^-1) = 0.73106 and 0.26894.
  auto [ids, w] = route({1, 3, 2, 0}, 2, MoeGating::kSoftmax, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(w[0], 0.643914f, 1e-5f);
  EXPECT_NEAR(w[1], 0.236883f, 1e-5f);
  auto [ids2, w2] = route({1, 3, 2, 0}, 2, MoeGating::kSoftmax, true);
  EXPECT_EQ(ids2, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(w2[0], 0.731059f, 1e-5f);
  EXPECT_NEAR(w2[1], 0.268941f, 1e-5f);
}

TEST_F(RefMoe, PerExpertScalesMultiplyTheRenormalisedWeights) {
  // gemma4: softmax, top 2, renormalised (0.731059, 0.268941 as above), then each times its expert's scale
  // (expert 1: 0.5, expert 2: 3); the scales never change the choice.
  auto [ids, w] = route({1, 3, 2, 0}, 2, MoeGating::kSoftmax, true, {}, 1.0f, {10, 0.5f, 3, 10});
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(w[0], 0.5f * 0.731059f, 1e-5f);
  EXPECT_NEAR(w[1], 3.0f * 0.268941f, 1e-5f);
}

TEST_F(RefMoe, SoftmaxOverTheChosenLogitsOnly) {
  // gpt-oss: the 3 largest logits (3, 2, 1), then softmax over them: e^3, e^2, e / (e + e^2 + e^3).
  auto [ids, w] = route({1, 3, 2, 0}, 3, MoeGating::kSoftmaxWeight, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0}));
  EXPECT_NEAR(w[0], 0.665241f, 1e-5f);
  EXPECT_NEAR(w[1], 0.244728f, 1e-5f);
  EXPECT_NEAR(w[2], 0.090031f, 1e-5f);
}

TEST_F(RefMoe, SigmoidWithASelectionBiasAndScale) {
  // Scores sigmoid(1, 3, 2, 0) + (0, -5, 0, 0) = 0.731, -4.05, 0.881, 0.5: experts 2 and 0 are chosen, and weigh
  // their unbiased sigmoids times 2: 2 x 0.880797 and 2 x 0.731059.
  auto [ids, w] = route({1, 3, 2, 0}, 2, MoeGating::kSigmoid, false, {0, -5, 0, 0}, 2.0f);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 0}));
  EXPECT_NEAR(w[0], 1.761594f, 1e-5f);
  EXPECT_NEAR(w[1], 1.462117f, 1e-5f);
}

TEST_F(RefMoe, TiesGoToTheLowerExpertAndNanNeverWins) {
  auto [ids, w] = route({0.5f, 0.5f, 0.5f}, 2, MoeGating::kSoftmax, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(w[0], 0.5f, 1e-6f);
  auto [ids2, w2] = route({NAN, -1.0f, 2.0f}, 2, MoeGating::kSoftmaxWeight, false);
  EXPECT_EQ(ids2, (std::vector<int32_t>{2, 1}));
}

// One token x = (2, -1) through experts 1 and 0 (weights 0.25, 0.75). gate rows: e0 (1, 0), e1 (0, 1); up rows
// (1, 1) for both; down: e0 (1, 0)^T, e1 (0, 2)^T.
//   e1: g = -1, u = 1, h = silu(-1) = -0.268941, y = (0, -0.537883)
//   e0: g = 2, u = 1, h = silu(2) = 1.761594, y = (1.761594, 0)
//   out = 0.25 y1 + 0.75 y0 = (1.321196, -0.134471)
TEST_F(RefMoe, ExpertsWeighTheirOutputsInSlotOrder) {
  const std::vector<float> gate = {1, 0, 0, 1}, up = {1, 1, 1, 1}, down = {1, 0, 0, 2};
  MoeExpertsOp op{f32({1, 2}, {2, -1}), i32({1, 2}, {1, 0}),  f32({1, 2}, {0.25f, 0.75f}), f32({2, 1, 2}, gate),
                  f32({2, 1, 2}, up),   f32({2, 2, 1}, down), f32({1, 2}, {9, 9})};
  ASSERT_TRUE(stream_->run(op).ok());
  auto out = get(op.out);
  EXPECT_NEAR(out[0], 1.321196f, 1e-5f);
  EXPECT_NEAR(out[1], -0.134471f, 1e-5f);
  // The same experts with gate and up fused per expert (gate rows first): [e0: (1, 0); (1, 1)], [e1: (0, 1); (1, 1)].
  MoeExpertsOp fused = op;
  fused.gate = fused.up = Tensor();
  fused.gate_up = f32({2, 2, 2}, {1, 0, 1, 1, 0, 1, 1, 1});
  fused.out = f32({1, 2}, {9, 9});
  ASSERT_TRUE(stream_->run(fused).ok());
  EXPECT_EQ(get(fused.out), out);
}

TEST_F(RefMoe, ClampedSwigluWithBiases) {
  // Expert 0 alone (weight 1), gate bias 10, up bias -3, down bias (0.5, 0): g = 2 + 10 = 12 -> min(12, 7) = 7,
  // u = 1 - 3 = -2 (inside the clamp), h = 7 / (1 + exp(-1.702 x 7)) x (-2 + 1) = -6.999953, y = (h + 0.5, 0).
  MoeExpertsOp op{f32({1, 2}, {2, -1}),   i32({1, 1}, {0}),       f32({1, 1}, {1.0f}), f32({1, 1, 2}, {1, 0}),
                  f32({1, 1, 2}, {1, 1}), f32({1, 2, 1}, {1, 0}), f32({1, 2}, {9, 9})};
  op.gate_bias = f32({1, 1}, {10});
  op.up_bias = f32({1, 1}, {-3});
  op.down_bias = f32({1, 2}, {0.5f, 0});
  op.act = Activation::kSwigluOai;
  ASSERT_TRUE(stream_->run(op).ok());
  auto out = get(op.out);
  EXPECT_NEAR(out[0], -6.499953f, 1e-5f);
  EXPECT_NEAR(out[1], 0.0f, 1e-6f);
}

TEST_F(RefMoe, AnExpertIdOutsideTheStackIsOutOfRange) {
  MoeExpertsOp op{f32({1, 2}, {2, -1}),         i32({1, 1}, {2}),
                  f32({1, 1}, {1.0f}),          f32({2, 1, 2}, {1, 0, 0, 1}),
                  f32({2, 1, 2}, {1, 1, 1, 1}), f32({2, 2, 1}, {1, 0, 0, 2}),
                  f32({1, 2}, {9, 9})};
  Status s = stream_->run(op);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  // A shape that disagrees is refused before any arithmetic, naming the tensor.
  op.ids = i32({1, 1}, {0});
  op.down = f32({2, 1, 2}, {1, 0, 0, 2});
  s = stream_->run(op);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("down"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::ops
