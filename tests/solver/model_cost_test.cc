// ModelCost and the roofline step model against values worked out by hand from the published llama2.c
// stories15M / stories110M shapes (dim, hidden, layers, heads, vocab as in karpathy/llama2.c's README).
#include <gtest/gtest.h>

#include "model/synth.h"
#include "solver/model_cost.h"
#include "solver/profile.h"

namespace tessera::solver {
namespace {

ModelCost cost_of(const char* shape, double wbytes, double kvbytes) {
  auto c = model::synth_shape(shape);
  EXPECT_TRUE(c.ok());
  return ModelCost::from_config(*c, wbytes, kvbytes);
}

TEST(ModelCost, Stories15MByHand) {
  // dim 288, hidden 768, 6 layers, 6 heads of 48, vocab 32000.
  ModelCost m = cost_of("stories15M", 4, 2);
  // per layer: 4 * 288^2 (q, k, v, o) + 3 * 288 * 768 (w1, w2, w3) = 331776 + 663552.
  EXPECT_DOUBLE_EQ(m.layer_matmul_params, 995328);
  EXPECT_DOUBLE_EQ(m.linear_flops(1), 11943936);      // 2 * 995328 * 6
  EXPECT_DOUBLE_EQ(m.classifier_flops(1), 18432000);  // 2 * 288 * 32000
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 6912);       // 2 * 6 * 288 * 2 bytes
  EXPECT_DOUBLE_EQ(m.weight_bytes, 15191712.0 * 4);   // 9216000 + 6 * (995328 + 576) + 288 params
  // Prefill of 256 tokens: 256 * 11943936 + 4 * 6 * 288 * (256 * 257 / 2) + 18432000.
  EXPECT_DOUBLE_EQ(m.prefill_flops(256), 3057647616.0 + 227377152.0 + 18432000.0);
}

// A mixture-of-experts layer: a token multiplies the router and the experts it is routed to, not all of them.
TEST(ModelCost, Qwen3MoeCountsTheRoutedExperts) {
  // dim 2048, q 32 x 128 = 4096, kv 4 x 128 = 512; 128 experts of 768, 8 per token.
  ModelCost m = cost_of("qwen3-30b-a3b", 2, 2);
  // attention 2048 * 4096 * 2 + 2048 * 512 * 2 = 18874368; router 2048 * 128 + 8 experts * 3 * 2048 * 768.
  EXPECT_DOUBLE_EQ(m.layer_matmul_params, 18874368.0 + 262144.0 + 37748736.0);
  // Every expert is resident: 30.5 B parameters (Qwen3-30B-A3B's published count).
  EXPECT_NEAR(m.weight_bytes / 2 / 1e9, 30.5, 0.1);
}

TEST(ModelCost, Stories110MByHand) {
  // dim 768, hidden 2048, 12 layers, 12 heads of 64, vocab 32000.
  ModelCost m = cost_of("stories110M", 2, 2);
  EXPECT_DOUBLE_EQ(m.layer_matmul_params, 7077888);  // 4 * 768^2 + 3 * 768 * 2048
  EXPECT_DOUBLE_EQ(m.linear_flops(1), 169869312);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 36864);  // 2 * 12 * 768 * 2
  EXPECT_DOUBLE_EQ(m.weight_bytes, 109529856.0 * 2);
  EXPECT_DOUBLE_EQ(m.decode_attention_flops(1024), 37748736);  // 4 * 12 * 768 * 1024

  // One decode step: 4 sequences of 100 positions each.
  StepWork w = step_work(m, decode_shape(4, 100));
  EXPECT_DOUBLE_EQ(w.flops, 4 * 169869312.0 + 4.0 * 12 * 768 * 400 + 4 * 49152000.0);
  EXPECT_DOUBLE_EQ(w.bytes, 219059712.0 + 36864.0 * 400);
  // Roofline: 1 ms + max(890830848 / 1e12, 233805312 / 1e11) = 1 ms + 2.33805312 ms (memory bound).
  LatencyModel lm{0.001, 1e12, 1e11};
  EXPECT_NEAR(step_seconds(lm, w, 1, 0, m), 0.00333805312, 1e-12);
  // Two-way tensor parallel halves the bound and adds 2 * 12 layers * 4 tokens * 768 * 2 bytes * 2 * 1/2
  // all-reduce bytes over a 1e9 B/s interconnect.
  double comm = 2.0 * 12 * 4 * 768 * 2 * 2 * 0.5 / 1e9;
  EXPECT_NEAR(step_seconds(lm, w, 2, 1e9, m), 0.001 + 0.00116902656 + comm, 1e-12);
}

TEST(ModelCost, PrefillShapeIsComputeBoundAtLength) {
  ModelCost m = cost_of("stories110M", 2, 2);
  LatencyModel lm{0, 1e12, 1e11};
  StepWork w = step_work(m, prefill_shape(2048, 1));
  EXPECT_GT(w.flops / lm.flops_per_s, w.bytes / lm.bytes_per_s);
  StepWork d = step_work(m, decode_shape(1, 2048));
  EXPECT_LT(d.flops / lm.flops_per_s, d.bytes / lm.bytes_per_s);
}

}  // namespace
}  // namespace tessera::solver
