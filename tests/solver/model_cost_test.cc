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

// Gemma 4 E2B (google/gemma-4-E2B's config): 35 layers, every fifth full (layers 4, 9, ..., 34), the rest sliding over
// 512 positions; 8 query heads and 1 KV head of 256 (sliding) or 512 (full); the last 20 layers reuse K and V of
// layers 13 (sliding) and 14 (full), so only layers 0-14 keep a cache: 12 sliding, 3 full.
// (Its config as the GGUF loader reads it from `tessera synth --shape gemma4-e2b`'s file.)
model::ModelConfig gemma4_e2b() {
  model::ModelConfig c;
  c.arch = "gemma4";
  EXPECT_TRUE(model::apply_arch_features(c).ok());
  c.dim = 1536, c.n_layers = 35, c.n_heads = 8, c.n_kv_heads = 1, c.head_dim = 512, c.head_dim_sliding = 256;
  c.hidden_dim = 6144, c.layer_hidden_dims.assign(35, 6144);
  for (int l = 15; l < 35; ++l) c.layer_hidden_dims[static_cast<size_t>(l)] = 12288;  // the KV-sharing layers' MLP
  c.per_layer_dim = 256, c.shared_kv_layers = 20, c.sliding_window = 512, c.sliding_pattern = 5;
  c.vocab_size = 262144, c.max_seq_len = 131072;
  EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
  return c;
}

TEST(ModelCost, Gemma4E2bCachesOnlyTheLayersWithKvOfTheirOwnAndSlidesItsWindow) {
  const model::ModelConfig c = gemma4_e2b();
  ModelCost m = ModelCost::from_config(c, 2, 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 12 * (2 * 256 * 2) + 3 * (2 * 512 * 2));  // 18432 (a uniform count: 71680)
  EXPECT_DOUBLE_EQ(m.full_q_dims, 7 * 8 * 512);
  EXPECT_DOUBLE_EQ(m.sliding_q_dims, 28 * 8 * 256);
  EXPECT_DOUBLE_EQ(m.full_kv_read_bytes, 7 * 2048);  // the sharing layers read their source's K and V
  EXPECT_DOUBLE_EQ(m.sliding_kv_read_bytes, 28 * 1024);
  EXPECT_DOUBLE_EQ(m.sliding_window, 512);
  // One decode token at 16384 positions: the full layers read all of them, the sliding ones 512.
  EXPECT_DOUBLE_EQ(m.decode_kv_read_bytes(16384), 14336.0 * 16384 + 28672.0 * 512);
  EXPECT_DOUBLE_EQ(m.decode_attention_flops(16384), 4.0 * (28672.0 * 16384 + 57344.0 * 512));
  EXPECT_DOUBLE_EQ(m.decode_attention_flops(100), 4.0 * (28672.0 + 57344.0) * 100);  // inside the window
  // A prompt of 8192: the sliding layers' tokens see 1..512 positions, then 512 each.
  EXPECT_DOUBLE_EQ(m.attention_flops(0, 8192),
                   4.0 * (28672.0 * 8192 * 8193 / 2 + 57344.0 * (512 * 513 / 2 + 7680 * 512)));
  // What the cache holds (its sliding layers keep their windows): 6144 bytes per position in the 3 full layers, and
  // per sequence the 12 sliding layers' 12288 bytes a position over the window and two blocks of 16, 544 positions.
  // A sequence of 16384 positions holds 16384 + 2 x 544 positions' worth of the full layers' bytes, 107 MB where
  // every layer's 18432 bytes a position come to 302 MB (2.8x the sequences); one of 100 holds 3 x 100.
  EXPECT_DOUBLE_EQ(m.held_kv_bytes_per_token, 3 * (2 * 512 * 2));
  EXPECT_DOUBLE_EQ(m.sliding_kv_bytes_per_token, 12 * (2 * 256 * 2));
  EXPECT_DOUBLE_EQ(m.window_held_positions, 544);
  EXPECT_DOUBLE_EQ(m.held_positions(16384), 16384 + 2 * 544);
  EXPECT_DOUBLE_EQ(m.held_positions(100), 300);
  // A handoff to a decode node that keeps only its windows ships the full layers' rows of every position and the
  // sliding layers' of the window it holds (api::KvLayout version 3); a prompt shorter than that, every row.
  EXPECT_DOUBLE_EQ(m.transfer_bytes(1000), 6144.0 * 1000 + 12288.0 * 544);
  EXPECT_DOUBLE_EQ(m.transfer_bytes(300), 18432.0 * 300);
  // Its 2.35 G per-layer embedding parameters (35 x 256 x 262144) are a table read a row per token, not per step.
  EXPECT_DOUBLE_EQ(m.lookup_bytes, 35.0 * 256 * 262144 * 2);
  EXPECT_DOUBLE_EQ(m.weight_read_bytes(1), m.weight_bytes - m.lookup_bytes);
  // What a token multiplies, by an independent count: every parameter but the tables, norms and scales.
  const double multiplied = m.n_layers * m.layer_matmul_params + m.classifier_params;
  EXPECT_NEAR(multiplied / (c.parameter_count() - 35.0 * 256 * 262144), 1.0, 1e-3);
}

// Qwen3.5-0.8B: three gated delta-net layers then one full-attention layer, 24 layers; the 18 linear layers keep a
// recurrent state per sequence (a window of 3 x 6144 and 16 matrices of 128 x 128, f32) and no K or V.
TEST(ModelCost, Qwen35HoldsKvInItsFullLayersAndStateInItsLinearOnes) {
  ModelCost m = cost_of("qwen3.5-0.8b", 2, 2);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 6 * (2 * 512 * 2));  // 2 KV heads of 256 in 6 layers
  EXPECT_DOUBLE_EQ(m.state_bytes, 18.0 * (3 * 6144 + 16 * 128 * 128) * 4);
  EXPECT_DOUBLE_EQ(m.state_positions(), 18.0 * (3 * 6144 + 16 * 128 * 128) * 4 / 12288);
  EXPECT_DOUBLE_EQ(m.held_positions(1000), 1000 + m.state_positions());  // no sliding layer: no window
  EXPECT_DOUBLE_EQ(m.full_q_dims, 6 * 8 * 256);
  EXPECT_DOUBLE_EQ(m.sliding_q_dims, 0);
  // Per layer: linear 1024 x 6144 (qkv) + 1024 x 2048 (z) + 2 x 1024 x 16 (beta, alpha) + 2048 x 1024 (out); full
  // 1024 x 4096 (q and its gate) + 2048 x 1024 (o) + 2 x 1024 x 512 (k, v); and the MLP's 3 x 1024 x 3584.
  EXPECT_DOUBLE_EQ(m.layer_matmul_params, (18 * 10518528.0 + 6 * 7340032.0 + 24 * 11010048.0) / 24);
  auto c = model::synth_shape("qwen3.5-0.8b");
  EXPECT_NEAR((m.n_layers * m.layer_matmul_params + m.classifier_params) / c->parameter_count(), 1.0, 1e-3);
  // A decode step of 4 sequences at 100 positions reads the weights, the 6 layers' K and V and each state, and
  // writes each state back.
  StepWork w = step_work(m, decode_shape(4, 100));
  EXPECT_DOUBLE_EQ(w.bytes, m.weight_bytes + 12288.0 * 400 + 2 * m.state_bytes * 4);
  // A prefill -> decode handoff ships the state with the prompt's KV.
  EXPECT_DOUBLE_EQ(m.transfer_bytes(1000), 12288.0 * 1000 + m.state_bytes);
}

// gpt-oss-20b: 24 layers alternating sliding (128 positions, from layer 0) and full; 32 experts of 2880, 4 per token.
TEST(ModelCost, GptOssReadsTheExpertsItsTokensAreRoutedTo) {
  ModelCost m = cost_of("gpt-oss-20b", 1, 2);
  EXPECT_DOUBLE_EQ(m.sliding_window, 128);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token, 24 * (2 * 512 * 2));
  // Held: the 12 full layers per position, the 12 sliding ones over 128 + 32 positions a sequence.
  EXPECT_DOUBLE_EQ(m.held_kv_bytes_per_token, 12 * 2048);
  EXPECT_DOUBLE_EQ(m.held_positions(1000), 1000 + 160);
  EXPECT_DOUBLE_EQ(m.transfer_bytes(1000), 12 * 2048 * (1000.0 + 160));
  EXPECT_DOUBLE_EQ(m.full_kv_read_bytes, 12 * 2048);
  EXPECT_DOUBLE_EQ(m.sliding_kv_read_bytes, 12 * 2048);
  const double experts = 24.0 * 32 * 3 * 2880 * 2880, table = 201088.0 * 2880;  // untied: the embedding is a table
  EXPECT_DOUBLE_EQ(m.expert_bytes, experts);
  EXPECT_DOUBLE_EQ(m.lookup_bytes, table);
  // One token reads 4 of 32 experts a layer; two tokens 1 - (7/8)^2 of them; a step of 512 tokens all of them.
  const double dense = m.weight_bytes - experts - table;
  EXPECT_DOUBLE_EQ(m.weight_read_bytes(1), dense + experts / 8);
  EXPECT_DOUBLE_EQ(m.weight_read_bytes(2), dense + experts * (1 - 49.0 / 64));
  EXPECT_NEAR(m.weight_read_bytes(512), dense + experts, experts * 1e-12);
  // The sliding half of a decode step at 4096 positions reads 128 of them.
  StepWork w = step_work(m, decode_shape(2, 4096));
  EXPECT_DOUBLE_EQ(w.bytes, m.weight_read_bytes(2) + 12 * 2048.0 * 2 * 4096 + 12 * 2048.0 * 2 * 128);
  // A chunk of 100 after 100 cached positions: the sliding layers' tokens see 101..128 positions, then 128.
  StepShape s;
  add_prefill_chunk(s, m, 100, 100);
  EXPECT_DOUBLE_EQ(s.prefill_positions, 100.0 * 100 + 100 * 101 / 2);
  EXPECT_DOUBLE_EQ(s.prefill_window_positions, 28.0 * 100 + 28 * 29 / 2 + 72 * 128);
  EXPECT_DOUBLE_EQ(s.prefill_window_past, 100);
  EXPECT_DOUBLE_EQ(windowed_positions(300, 10, 128), 1280);
}

// Phi-3 mini slides every layer over 2047 positions of its 4096: no full layer keeps a cache, so capacity in positions
// would not say what fits; it is counted per position, as every model was before.
TEST(ModelCost, AModelWhoseEveryLayerSlidesIsCountedPerPosition) {
  ModelCost m = cost_of("phi3-mini", 2, 2);
  EXPECT_DOUBLE_EQ(m.sliding_window, 2047);
  EXPECT_DOUBLE_EQ(m.held_kv_bytes_per_token, m.kv_bytes_per_token);
  EXPECT_DOUBLE_EQ(m.window_held_positions, 0);
  EXPECT_DOUBLE_EQ(m.held_positions(3000), 3000);
}

TEST(ModelCost, PrefillShapeIsComputeBoundAtLength) {
  ModelCost m = cost_of("stories110M", 2, 2);
  LatencyModel lm{0, 1e12, 1e11};
  StepWork w = step_work(m, prefill_shape(m, 2048, 1));
  EXPECT_GT(w.flops / lm.flops_per_s, w.bytes / lm.bytes_per_s);
  StepWork d = step_work(m, decode_shape(1, 2048));
  EXPECT_LT(d.flops / lm.flops_per_s, d.bytes / lm.bytes_per_s);
}

}  // namespace
}  // namespace tessera::solver
