// Each reference operator on a small case whose answer was worked out by hand (values in comments).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/quant.h"
#include "ops/backend.h"
#include "ops/registry.h"
#include "support/ref_device_test.h"

namespace tessera::ops {
namespace {

class RefOps : public testing::RefDeviceTest {};

TEST_F(RefOps, Embedding) {
  Tensor table = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor out = make(DType::kF32, {2, 2});
  ASSERT_TRUE(stream_->run(EmbeddingOp{table, i32({2}, {2, 0}), out}).ok());
  expect_near(get(out), {5, 6, 1, 2}, 0);
  Status bad = stream_->run(EmbeddingOp{table, i32({2}, {3, 0}), out});
  EXPECT_EQ(bad.code(), StatusCode::kOutOfRange);
}

// A table in a quantised type: each looked-up row is the row's blocks dequantised (a q8_0 row of 32: its scale
// times its quants); a table whose rows are not whole blocks, or of i32, is refused by validation.
TEST_F(RefOps, EmbeddingFromAQuantisedTable) {
  std::vector<float> w(3 * 32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.25f;
  std::vector<uint8_t> q(dtype_bytes(DType::kQ8_0, w.size()));
  ASSERT_TRUE(quantize(w, DType::kQ8_0, q.data()).ok());
  std::vector<float> want(w.size());
  ASSERT_TRUE(dequantize(q.data(), DType::kQ8_0, want).ok());
  Tensor table = make(DType::kQ8_0, {3, 32}, q.data());
  Tensor out = make(DType::kF32, {2, 32});
  ASSERT_TRUE(stream_->run(EmbeddingOp{table, i32({2}, {2, 0}), out}).ok());
  std::vector<float> rows(want.begin() + 64, want.end());
  rows.insert(rows.end(), want.begin(), want.begin() + 32);
  expect_near(get(out), rows, 0);
  Tensor ragged = make(DType::kQ8_0, {2, 48});  // 48 elements: one and a half q8_0 blocks
  Tensor out48 = make(DType::kF32, {1, 48});
  Status bad = stream_->run(EmbeddingOp{ragged, i32({1}, {0}), out48});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("whole blocks"), std::string::npos) << bad.message();
  Status ints = stream_->run(EmbeddingOp{i32({2, 2}, {1, 2, 3, 4}), i32({1}, {0}), make(DType::kF32, {1, 2})});
  EXPECT_EQ(ints.code(), StatusCode::kInvalidArgument);
}

TEST_F(RefOps, RmsNorm) {
  // mean(x^2) = 30/4 = 7.5, rms = 2.7386128; x / rms = .365148 .730297 1.095445 1.460593, times weight.
  Tensor out = make(DType::kF32, {1, 4});
  ASSERT_TRUE(stream_->run(RmsNormOp{f32({1, 4}, {1, 2, 3, 4}), f32({4}, {1, 2, 0.5f, -1}), out, 1e-5f}).ok());
  expect_near(get(out), {0.365148f, 1.460593f, 0.547723f, -1.460593f});
}

TEST_F(RefOps, AddRmsNormUpdatesTheResidual) {
  // residual [1, 1] + delta [2, -2] = [3, -1]; mean square 5, rms 2.236068 -> [1.341641, -0.447214].
  Tensor residual = f32({1, 2}, {1, 1});
  Tensor out = make(DType::kF32, {1, 2});
  ASSERT_TRUE(stream_->run(AddRmsNormOp{residual, f32({1, 2}, {2, -2}), f32({2}, {1, 1}), out, 1e-5f}).ok());
  expect_near(get(residual), {3, -1}, 0);
  expect_near(get(out), {1.341641f, -0.447214f});
}

TEST_F(RefOps, RopeInterleavedAndHalf) {
  // head_dim 4, position 1: pair 0 turns by 1 rad (cos .540302, sin .841471), pair 1 by 10000^-0.5 = 0.01 rad
  // (cos .99995, sin .00999983). Interleaved pairs (x0,x1),(x2,x3); half pairs (x0,x2),(x1,x3).
  Tensor q = f32({1, 1, 4}, {1, 0, 0, 1});
  Tensor k = f32({1, 1, 4}, {1, 0, 0, 1});
  ASSERT_TRUE(stream_->run(RopeOp{q, k, i32({1}, {1}), 10000.0f, RopeLayout::kInterleaved}).ok());
  expect_near(get(q), {0.540302f, 0.841471f, -0.00999983f, 0.99995f});
  expect_near(get(k), {0.540302f, 0.841471f, -0.00999983f, 0.99995f});

  Tensor q2 = f32({1, 1, 4}, {1, 0, 0, 1});
  Tensor k2 = f32({1, 1, 4}, {0, 0, 0, 0});
  ASSERT_TRUE(stream_->run(RopeOp{q2, k2, i32({1}, {1}), 10000.0f, RopeLayout::kHalf}).ok());
  expect_near(get(q2), {0.540302f, -0.00999983f, 0.841471f, 0.99995f});

  Tensor q3 = f32({1, 1, 4}, {1, 2, 3, 4});
  ASSERT_TRUE(stream_->run(RopeOp{q3, f32({1, 1, 4}, {0, 0, 0, 0}), i32({1}, {0}), 10000.0f, RopeLayout::kHalf}).ok());
  expect_near(get(q3), {1, 2, 3, 4}, 0);  // position 0 does not turn
}

// Three cached positions in blocks [1, 0] (2 tokens per block, 1 kv head, head_dim 2):
// k = [1,0] [0,1] [1,1], v = [1,2] [3,4] [5,6].
class RefAttention : public RefOps {
 protected:
  void SetUp() override {
    RefOps::SetUp();
    kc_ = make(DType::kF32, {2, 2, 1, 2});
    vc_ = make(DType::kF32, {2, 2, 1, 2});
    Tensor k = f32({3, 1, 2}, {1, 0, 0, 1, 1, 1});
    Tensor v = f32({3, 1, 2}, {1, 2, 3, 4, 5, 6});
    ASSERT_TRUE(stream_->run(KvWriteOp{k, v, kc_, vc_, i32({3}, {2, 3, 0})}).ok());
  }
  Tensor kc_, vc_;
};

TEST_F(RefAttention, KvWriteFillsTheSlots) {
  // slot 0 = block 0 row 0 (position 2); slots 2, 3 = block 1 (positions 0, 1); slot 1 untouched.
  expect_near(get(kc_), {1, 1, 0, 0, 1, 0, 0, 1}, 0);
  expect_near(get(vc_), {5, 6, 0, 0, 1, 2, 3, 4}, 0);
  Status bad = stream_->run(KvWriteOp{f32({1, 1, 2}, {0, 0}), f32({1, 1, 2}, {0, 0}), kc_, vc_, i32({1}, {4})});
  EXPECT_EQ(bad.code(), StatusCode::kOutOfRange);
}

TEST_F(RefAttention, DecodeWithGroupedQueryHeads) {
  // Two query heads share the kv head. Head 0 q=[1,0]: scores [1,0,1]/sqrt2, softmax [.401112 .197776 .401112],
  // out = [3, 4] exactly. Head 1 q=[0,1]: scores [0,1,1]/sqrt2 -> [.197776 .401112 .401112] -> [3.406673, 4.406673].
  Tensor out = make(DType::kF32, {1, 2, 2});
  AttentionDecodeOp op{f32({1, 2, 2}, {1, 0, 0, 1}), kc_, vc_, i32({1, 2}, {1, 0}), i32({1}, {3}), out};
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {3, 4, 3.406673f, 4.406673f}, 1e-4f);
}

TEST_F(RefAttention, DecodeBatchOfSequencesWithDifferentLengths) {
  // Sequence 0 sees one position (v = [1,2]); sequence 1 sees all three (out [3, 4]).
  Tensor out = make(DType::kF32, {2, 1, 2});
  AttentionDecodeOp op{f32({2, 1, 2}, {1, 0, 1, 0}), kc_, vc_, i32({2, 2}, {1, 0, 1, 0}), i32({2}, {1, 3}), out};
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {1, 2, 3, 4}, 1e-4f);
}

TEST_F(RefAttention, PrefillIsCausal) {
  // Position 0 sees v0 = [1,2]; position 1: softmax[.707107, 0] = [.669762 .330238] -> [1.660476, 2.660476];
  // position 2: [3, 4].
  Tensor out = make(DType::kF32, {3, 1, 2});
  AttentionPrefillOp op{f32({3, 1, 2}, {1, 0, 1, 0, 1, 0}), kc_, vc_, i32({2}, {1, 0}), out, 0};
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {1, 2, 1.660476f, 2.660476f, 3, 4}, 1e-4f);
  // A chunk that starts later: the single query at position 2 sees everything.
  Tensor out2 = make(DType::kF32, {1, 1, 2});
  ASSERT_TRUE(stream_->run(AttentionPrefillOp{f32({1, 1, 2}, {1, 0}), kc_, vc_, i32({2}, {1, 0}), out2, 2}).ok());
  expect_near(get(out2), {3, 4}, 1e-4f);
}

TEST_F(RefAttention, BlockOutsideTheCacheIsAnError) {
  Tensor out = make(DType::kF32, {1, 1, 2});
  AttentionDecodeOp op{f32({1, 1, 2}, {1, 0}), kc_, vc_, i32({1, 2}, {1, 7}), i32({1}, {3}), out};
  EXPECT_EQ(stream_->run(op).code(), StatusCode::kOutOfRange);
}

TEST_F(RefOps, MatMul) {
  // w rows: [1,0,0] [0,1,0] [1,1,1] [2,0,-1]; x rows [1,2,3] and [0,-1,1].
  Tensor out = make(DType::kF32, {2, 4});
  Tensor w = f32({4, 3}, {1, 0, 0, 0, 1, 0, 1, 1, 1, 2, 0, -1});
  ASSERT_TRUE(stream_->run(MatMulOp{f32({2, 3}, {1, 2, 3, 0, -1, 1}), w, out}).ok());
  expect_near(get(out), {1, 2, 6, -1, 0, -1, 0, -1}, 0);
  Tensor biased = make(DType::kF32, {2, 4});
  ASSERT_TRUE(stream_->run(MatMulOp{f32({2, 3}, {1, 2, 3, 0, -1, 1}), w, biased, f32({4}, {0.5f, 0, 0, -1})}).ok());
  expect_near(get(biased), {1.5f, 2, 6, -2, 0.5f, -1, 0, -2}, 0);
  Status wrong = stream_->run(MatMulOp{f32({2, 3}, {1, 2, 3, 0, -1, 1}), w, biased, f32({3}, {0, 0, 0})});
  EXPECT_NE(wrong.message().find("bias"), std::string::npos) << wrong.message();
}

TEST_F(RefOps, SiluMulAddSoftmaxArgmax) {
  // silu(0)=0; silu(1)=.731059; silu(-1)=-.268941; times 2.
  Tensor o = make(DType::kF32, {1, 3});
  ASSERT_TRUE(stream_->run(SiluMulOp{f32({1, 3}, {0, 1, -1}), f32({1, 3}, {2, 2, 2}), o}).ok());
  expect_near(get(o), {0, 1.462117f, -0.537883f});

  Tensor a = f32({1, 3}, {1, 2, 3});
  ASSERT_TRUE(stream_->run(AddOp{a, f32({1, 3}, {10, 20, 30}), a}).ok());
  expect_near(get(a), {11, 22, 33}, 0);

  // softmax [1,2,3] = [.090031, .244728, .665241]
  Tensor s = make(DType::kF32, {1, 3});
  ASSERT_TRUE(stream_->run(SoftmaxOp{f32({1, 3}, {1, 2, 3}), s}).ok());
  expect_near(get(s), {0.090031f, 0.244728f, 0.665241f});

  Tensor idx = make(DType::kI32, {2});
  ASSERT_TRUE(stream_->run(ArgmaxOp{f32({2, 4}, {1, 3, 3, 2, -1, -5, -2, -3}), idx}).ok());
  EXPECT_EQ(get<int32_t>(idx), (std::vector<int32_t>{1, 0}));  // the first of equal maxima
}

TEST_F(RefOps, ValidationNamesTheOperatorAndTensor) {
  Tensor out = make(DType::kF32, {2, 4});
  Status s = stream_->run(MatMulOp{f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({4, 2}, {0, 0, 0, 0, 0, 0, 0, 0}), out});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("matmul"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("w"), std::string::npos) << s.message();

  Tensor small = make(DType::kF32, {1, 2});
  Tensor past_end = small;
  past_end.offset = 4;
  Status p = stream_->run(AddOp{past_end, past_end, past_end});
  EXPECT_NE(p.message().find("runs past"), std::string::npos) << p.message();

  EXPECT_NE(stream_->run(RmsNormOp{Tensor(), small, small}).message().find("x is missing"), std::string::npos);
}

TEST_F(RefOps, CapabilityQueryExplainsUnsupportedCases) {
  Tensor wi = make(DType::kI32, {4, 3});
  Tensor out = make(DType::kF32, {1, 4});
  Support s = device_->supports(MatMulOp{make(DType::kF32, {1, 3}), wi, out});
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("i32"), std::string::npos) << s.reason;
  EXPECT_TRUE(device_->supports(MatMulOp{make(DType::kF32, {1, 3}), make(DType::kF32, {4, 3}), out}).supported);
  EXPECT_EQ(stream_->run(MatMulOp{make(DType::kF32, {1, 3}), wi, out}).code(), StatusCode::kUnimplemented);
  // A KV cache type outside llama.cpp's -ctk set (q4_1) is refused, naming the ones kept.
  Tensor q41 = make(DType::kQ4_1, {1, 2, 1, 32});
  Support kv = device_->supports(
      KvWriteOp{make(DType::kF32, {1, 1, 32}), make(DType::kF32, {1, 1, 32}), q41, q41, make(DType::kI32, {1})});
  EXPECT_FALSE(kv.supported);
  EXPECT_NE(kv.reason.find("f16, bf16, q8_0 or q4_0"), std::string::npos) << kv.reason;
}

// Stored weight types: values every format represents exactly (multiples of 1/8 under 16 in magnitude;
// q4_0 blocks scaled so each value is d * (nibble - 8) with d = 1/8) must give the f32 answer exactly.
TEST_F(RefOps, MatMulWithStoredWeightTypesMatchesF32WhenValuesAreExact) {
  std::vector<float> w(64), x(32);
  for (size_t i = 0; i < 32; ++i) {
    w[i] = static_cast<float>(static_cast<int>(i % 16) - 8) / 8.0f;             // -1 .. 0.875: q4_0 exact with d=1/8
    w[32 + i] = static_cast<float>(static_cast<int>((i * 5) % 16) - 8) / 8.0f;  // amax 1 => d = 1/8
    x[i] = static_cast<float>(i) - 10.0f;
  }
  w[0] = -1.0f;  // amax 1 in both rows
  w[32] = -1.0f;
  Tensor xt = f32({1, 32}, x);
  Tensor want = make(DType::kF32, {1, 2});
  ASSERT_TRUE(stream_->run(MatMulOp{xt, f32({2, 32}, w), want}).ok());
  std::vector<float> expected = get(want);
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (t == DType::kQ8_0) continue;  // q8_0's d = 1/127 is not exact; checked below
    std::vector<uint8_t> stored(dtype_bytes(t, w.size()));
    ASSERT_TRUE(quantize(w, t, stored.data()).ok());
    Tensor wt = make(t, {2, 32}, stored.data());
    Tensor out = make(DType::kF32, {1, 2});
    ASSERT_TRUE(device_->supports(MatMulOp{xt, wt, out}).supported) << dtype_name(t);
    ASSERT_TRUE(stream_->run(MatMulOp{xt, wt, out}).ok()) << dtype_name(t);
    EXPECT_EQ(get(out), expected) << dtype_name(t);
  }
  // q8_0 with d = f16(1/127): each weight is off by at most the f16 rounding of d (relative 2^-11) times 127
  // steps, so the dot product is within that fraction of sum |x w|.
  std::vector<uint8_t> q8(dtype_bytes(DType::kQ8_0, w.size()));
  ASSERT_TRUE(quantize(w, DType::kQ8_0, q8.data()).ok());
  Tensor out = make(DType::kF32, {1, 2});
  ASSERT_TRUE(stream_->run(MatMulOp{xt, make(DType::kQ8_0, {2, 32}, q8.data()), out}).ok());
  std::vector<float> got = get(out);
  for (size_t i = 0; i < 2; ++i) {
    float abs_sum = 0.0f;
    for (size_t j = 0; j < 32; ++j) abs_sum += std::fabs(x[j] * w[i * 32 + j]);
    EXPECT_NEAR(got[i], expected[i], abs_sum / 1024.0f);
    EXPECT_NE(got[i], expected[i]);  // and it really went through the q8_0 scale
  }
}

TEST_F(RefOps, KvCacheInF16RoundsStoredValuesOnly) {
  // 1/3 is stored as f16 0x3555 = 0.333251953125; attention over one position returns v exactly as stored.
  Tensor kc = make(DType::kF16, {1, 2, 1, 2});
  Tensor vc = make(DType::kF16, {1, 2, 1, 2});
  ASSERT_TRUE(
      stream_->run(KvWriteOp{f32({1, 1, 2}, {1.0f / 3, 2}), f32({1, 1, 2}, {1.0f / 3, -4}), kc, vc, i32({1}, {0})})
          .ok());
  std::vector<uint16_t> raw(4);
  ASSERT_TRUE(stream_->download(kc, raw.data()).ok());
  EXPECT_EQ(raw[0], 0x3555);
  EXPECT_EQ(raw[1], 0x4000);  // 2.0
  Tensor out = make(DType::kF32, {1, 1, 2});
  ASSERT_TRUE(
      stream_->run(AttentionDecodeOp{f32({1, 1, 2}, {1, 1}), kc, vc, i32({1, 1}, {0}), i32({1}, {1}), out}).ok());
  expect_near(get(out), {0.333251953125f, -4.0f}, 0);
  Tensor mixed = make(DType::kF32, {1, 2, 1, 2});
  EXPECT_EQ(stream_->run(KvWriteOp{f32({1, 1, 2}, {0, 0}), f32({1, 1, 2}, {0, 0}), kc, mixed, i32({1}, {0})}).code(),
            StatusCode::kInvalidArgument);
}

// The family options, each on a case worked out by hand.
TEST_F(RefAttention, SlidingWindowHidesOlderPositions) {
  // q=[1,0] at position 2 with a window of 2 sees positions 1 and 2 only: scores [0, .707107], softmax
  // [.330238 .669762] -> .330238*[3,4] + .669762*[5,6] = [4.339523, 5.339523].
  Tensor out = make(DType::kF32, {1, 1, 2});
  AttentionDecodeOp op{f32({1, 1, 2}, {1, 0}), kc_, vc_, i32({1, 2}, {1, 0}), i32({1}, {3}), out};
  op.scores.window = 2;
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {4.339523f, 5.339523f}, 1e-4f);
  // The same through prefill: position 2 of a 3-token chunk.
  Tensor out3 = make(DType::kF32, {3, 1, 2});
  AttentionPrefillOp pre{f32({3, 1, 2}, {1, 0, 1, 0, 1, 0}), kc_, vc_, i32({2}, {1, 0}), out3, 0};
  pre.scores.window = 2;
  ASSERT_TRUE(stream_->run(pre).ok());
  std::vector<float> got = get(out3);
  EXPECT_NEAR(got[4], 4.339523f, 1e-4f);
  EXPECT_NEAR(got[5], 5.339523f, 1e-4f);
  EXPECT_NEAR(got[0], 1.0f, 1e-6f);  // position 0 sees itself
}

TEST_F(RefAttention, SinkTakesProbabilityAndReadsNoValue) {
  // q=[1,0] at position 2: scores [.707107, 0, .707107] and a sink of 1; the softmax over the four gives the
  // positions [.254412, .125264, .254412] (sum .650360, the sink keeps the rest) -> [1.951079, 2.601439].
  Tensor out = make(DType::kF32, {1, 1, 2});
  AttentionDecodeOp op{f32({1, 1, 2}, {1, 0}), kc_, vc_, i32({1, 2}, {1, 0}), i32({1}, {3}), out};
  op.sinks = f32({1}, {1.0f});
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {1.951079f, 2.601439f}, 1e-5f);
  Tensor out3 = make(DType::kF32, {3, 1, 2});
  AttentionPrefillOp pre{f32({3, 1, 2}, {1, 0, 1, 0, 1, 0}), kc_, vc_, i32({2}, {1, 0}), out3, 0};
  pre.sinks = op.sinks;
  ASSERT_TRUE(stream_->run(pre).ok());
  std::vector<float> got = get(out3);
  EXPECT_NEAR(got[4], 1.951079f, 1e-5f);
  EXPECT_NEAR(got[5], 2.601439f, 1e-5f);
  op.sinks = f32({2}, {1.0f, 1.0f});  // one per query head, not two
  EXPECT_EQ(stream_->run(op).code(), StatusCode::kInvalidArgument);
}

TEST_F(RefAttention, ScaleAndSoftCap) {
  // q=[0,1], scale 1: dots [0,1,1]; soft-cap 0.5: 0.5 tanh(s / 0.5) = [0, .482014, .482014];
  // softmax -> [3.292230, 4.292230] (uncapped it would be [3.533913, 4.533913]).
  Tensor out = make(DType::kF32, {1, 1, 2});
  AttentionDecodeOp op{f32({1, 1, 2}, {0, 1}), kc_, vc_, i32({1, 2}, {1, 0}), i32({1}, {3}), out};
  op.scores.scale = 1.0f;
  op.scores.softcap = 0.5f;
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(out), {3.292230f, 4.292230f}, 1e-4f);
  op.scores.softcap = -1.0f;
  EXPECT_EQ(stream_->run(op).code(), StatusCode::kInvalidArgument);
}

TEST_F(RefOps, RopeWithFrequencyTableAndMscale) {
  // Half layout, position 3, freqs [0.5, 0.1], mscale 2: pair (x0=1, x2=3) turns by 1.5 with cos/sin
  // doubled -> [1c - 3s, 1s + 3c] = [-5.843496, 2.419413]; pair (x1=2, x3=4) by 0.3 -> [1.457184, 8.824773].
  Tensor q = f32({1, 1, 4}, {1, 2, 3, 4});
  RopeOp op{q, f32({1, 1, 4}, {0, 0, 0, 0}), i32({1}, {3}), 10000.0f, RopeLayout::kHalf};
  op.freqs = f32({2}, {0.5f, 0.1f});
  op.mscale = 2.0f;
  ASSERT_TRUE(stream_->run(op).ok());
  expect_near(get(q), {-5.843496f, 1.457184f, 2.419413f, 8.824773f});
  op.freqs = f32({3}, {1, 1, 1});  // not head_dim / 2
  EXPECT_EQ(stream_->run(op).code(), StatusCode::kInvalidArgument);
}

TEST_F(RefOps, GeluTanhMulAndScaledEmbedding) {
  // gelu_tanh(1) = 0.841192, gelu_tanh(-2) = -0.045402 (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
  Tensor out = make(DType::kF32, {1, 2});
  ASSERT_TRUE(stream_->run(SiluMulOp{f32({1, 2}, {1, -2}), f32({1, 2}, {2, 1}), out, Activation::kGeluTanh}).ok());
  expect_near(get(out), {1.682384f, -0.045402f});
  Tensor emb = make(DType::kF32, {1, 2});
  ASSERT_TRUE(stream_->run(EmbeddingOp{f32({2, 2}, {1, 2, 3, 4}), i32({1}, {1}), emb, 2.5f}).ok());
  expect_near(get(emb), {7.5f, 10.0f}, 0);
}

}  // namespace
}  // namespace tessera::ops
