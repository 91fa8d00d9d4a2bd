// The KV budget a node starts with: the arithmetic checked by hand on a llama-3.2-1B-shaped config (16 layers, 8 KV
// heads of 64: 2 * 16 * 512 * 2 bytes = 32 KiB per f16 token), the fraction of device memory less the weights,
// a shortened context with its warning, and the hybrid model's state taken first.
#include "serve/kv_budget.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "model/synth.h"

namespace tessera::serve {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

model::ModelConfig llama_1b() {
  auto c = model::synth_shape("llama3.2-1b");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

TEST(KvBudget, MemoryToBlocksAndTheServedContext) {
  const model::ModelConfig c = llama_1b();
  ASSERT_EQ(c.kv_dim(), 512);
  ASSERT_EQ(c.n_layers, 16);
  // 1024 MiB / 32 KiB per token = 32768 tokens = 2048 blocks of 16; the model's context (131072) does not fit.
  auto b = plan_kv_budget(c, {.kv_memory_mib = 1024, .max_num_seqs = 64}, 0, 0, 0);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->max_seq_len, 32768);
  EXPECT_EQ(b->num_blocks, 2048);
  ASSERT_EQ(b->warnings.size(), 1u);
  EXPECT_NE(b->warnings[0].find("holds 32768 tokens, less than the model's context of 131072"), std::string::npos)
      << b->warnings[0];
  // --max-model-len 1024: 64 blocks a sequence, at most 64 sequences' worth (4096), under the 2048 the memory holds.
  auto m = plan_kv_budget(c, {.kv_memory_mib = 1024, .max_model_len = 1024, .max_num_seqs = 16}, 0, 0, 0);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->max_seq_len, 1024);
  EXPECT_EQ(m->num_blocks, 16 * 64) << "no more than every sequence at full context";
  EXPECT_TRUE(m->warnings.empty());
  // f32 KV: half the tokens.
  auto f32 = plan_kv_budget(c, {.kv_memory_mib = 1024, .kv_dtype = DType::kF32}, 0, 0, 0);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->max_seq_len, 16384);
}

TEST(KvBudget, AFractionOfTheDeviceLessTheWeights) {
  const model::ModelConfig c = llama_1b();
  // 0.5 of 8 GiB = 4096 MiB, less 2048 MiB of weights: 2048 MiB of KV.
  auto b = plan_kv_budget(c, {.kv_memory_fraction = 0.5}, 8192 * kMiB, 0, 2048 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_DOUBLE_EQ(b->kv_mib, 2048);
  EXPECT_EQ(b->max_seq_len, 65536);
  // A host device reports no memory: the machine's RAM counts.
  auto host = plan_kv_budget(c, {.kv_memory_fraction = 0.5}, 0, 8192 * kMiB, 2048 * kMiB);
  ASSERT_TRUE(host.ok());
  EXPECT_DOUBLE_EQ(host->kv_mib, 2048);
  auto none = plan_kv_budget(c, {.kv_memory_fraction = 0.2}, 8192 * kMiB, 0, 2048 * kMiB);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("leaves no room for KV"), std::string::npos) << none.status().message();
}

TEST(KvBudget, WhatDoesNotFitIsRefusedNamingTheFlag) {
  const model::ModelConfig c = llama_1b();
  auto too_long = plan_kv_budget(c, {.max_model_len = 200000}, 0, 0, 0);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("--max-model-len 200000 exceeds"), std::string::npos);
  auto tiny = plan_kv_budget(c, {.kv_memory_mib = 16, .max_model_len = 4096}, 0, 0, 0);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("less than the served context of 4096"), std::string::npos)
      << tiny.status().message();
}

TEST(KvBudget, AHybridModelsStateComesOutOfTheBudgetFirst) {
  auto c = model::synth_shape("qwen3.5-0.8b");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE(c->has_linear_layers());
  const double state_mib = static_cast<double>(c->recurrent_state_bytes()) * 8 / kMiB;
  auto b = plan_kv_budget(*c, {.kv_memory_mib = 1024, .max_model_len = 4096, .max_num_seqs = 8}, 0, 0, 0);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->state_slots, 8);
  EXPECT_DOUBLE_EQ(b->state_mib, state_mib);
  const model::ModelConfig plain = [&] {
    model::ModelConfig p = *c;
    p.layer_kinds.clear();  // every layer full attention
    return p;
  }();
  EXPECT_EQ(
      plan_kv_budget(plain, {.kv_memory_mib = 1024, .max_model_len = 4096, .max_num_seqs = 8}, 0, 0, 0)->state_slots,
      0);
  auto starved = plan_kv_budget(*c, {.kv_memory_mib = state_mib / 2, .max_num_seqs = 8}, 0, 0, 0);
  ASSERT_FALSE(starved.ok());
  EXPECT_NE(starved.status().message().find("does not hold the recurrent state"), std::string::npos);
}

// Prefix reuse for a hybrid model keeps state checkpoints (engine/kv_cache.h), one slot's state each, from the budget
// after the running sequences' state: by default as many as a quarter of what is left holds.
TEST(KvBudget, AHybridModelsStateCheckpointsComeNextAndTurnPrefixReuseOn) {
  auto c = model::synth_shape("qwen3.5-0.8b");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const double each = static_cast<double>(c->recurrent_state_bytes()) / kMiB;  // 19.3 MiB
  auto has = [](const KvBudget& b, const std::string& text) {
    return std::any_of(b.info.begin(), b.info.end(), [&](const std::string& l) { return l.find(text) != l.npos; });
  };
  // 8 sequences in 1024 MiB: 154 MiB of state, and a quarter of the 870 left holds 11 checkpoints.
  auto eight = plan_kv_budget(*c, {.kv_memory_mib = 1024, .max_model_len = 4096, .max_num_seqs = 8}, 0, 0, 0);
  ASSERT_TRUE(eight.ok()) << eight.status().to_string();
  EXPECT_EQ(eight->state_checkpoints, 11);
  EXPECT_DOUBLE_EQ(eight->checkpoint_mib, 11 * each);
  EXPECT_TRUE(has(*eight, "prefix reuse through 11 state checkpoints"));
  // 64 sequences in 2048 MiB: 1234 MiB of state; a quarter of the 814 left holds 10.
  auto many = plan_kv_budget(*c, {.kv_memory_mib = 2048, .max_model_len = 4096, .max_num_seqs = 64}, 0, 0, 0);
  ASSERT_TRUE(many.ok()) << many.status().to_string();
  EXPECT_EQ(many->state_checkpoints, static_cast<int>(0.25 * (2048 - 64 * each) / each));
  EXPECT_EQ(many->state_checkpoints, 10);
  // Asked for: they take their bytes from the blocks; 0 or prefix reuse turned off: none.
  KvBudgetFlags f{.kv_memory_mib = 1024, .max_num_seqs = 8};  // the model's context: the blocks are the budget's
  f.state_checkpoints = 0;
  auto none = plan_kv_budget(*c, f, 0, 0, 0);
  f.state_checkpoints = 20;
  auto twenty = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_TRUE(none.ok() && twenty.ok());
  EXPECT_EQ(none->state_checkpoints, 0);
  EXPECT_TRUE(has(*none, "prefix reuse is off"));
  EXPECT_EQ(twenty->state_checkpoints, 20);
  const double block_mib = (1024 - 8 * each) / none->num_blocks;  // what one block costs, from the budget
  EXPECT_NEAR(none->num_blocks - twenty->num_blocks, 20 * each / block_mib, 2.0);
  f.state_checkpoints = 100;  // 1930 MiB
  auto too_many = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("--state-checkpoints 100"), std::string::npos)
      << too_many.status().message();
  f.state_checkpoints = -1;
  f.prefix_reuse = false;  // --no-prefix-cache, a KV connector, a PD role
  auto off = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->state_checkpoints, 0);
  EXPECT_EQ(off->num_blocks, none->num_blocks);
}

TEST(KvBudget, SlidingLayersKeepOnlyTheirWindowsWhenThatHoldsMore) {
  // gpt-oss-20b: 24 layers alternating sliding (window 128) and full, 8 KV heads of 64: 12 * 512 * 2 (K, V) * 2
  // bytes = 24 KiB per f16 token in each kind, a block of 16 tokens 384 KiB.
  auto c = model::synth_shape("gpt-oss-20b");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->sliding_window, 128);
  KvBudgetFlags f{.kv_memory_mib = 1024, .max_num_seqs = 64, .window_kv = true, .max_batch_tokens = 2048};
  auto b = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  // Windows: 64 sequences of (127 positions: 8 blocks, 9 where they straddle, +1 for a step starting mid-block) and a
  // step's 2048 positions (128 blocks) = 768 blocks = 288 MiB; the full layers' 736 MiB hold 1962 blocks, where every
  // layer's would hold 1365 in 1024 MiB.
  EXPECT_EQ(b->window_blocks, 768);
  EXPECT_DOUBLE_EQ(b->window_mib, 288.0);
  EXPECT_EQ(b->num_blocks, 1962);
  EXPECT_EQ(b->max_seq_len, 1962 * 16);
  f.window_kv = false;
  auto whole = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->window_blocks, 0);
  EXPECT_EQ(whole->num_blocks, 1365);
  // A served context of 4096 for 8 sequences: windows 8 * 10 + 128 = 208 blocks (78 MiB), the full layers capped at
  // 8 * 256 = 2048 of the 2522 blocks the other 946 MiB hold; the 474 left go to the windows' pool.
  KvBudgetFlags short_ctx = f;
  short_ctx.max_model_len = 4096;
  short_ctx.max_num_seqs = 8;
  short_ctx.window_kv = true;
  auto s = plan_kv_budget(*c, short_ctx, 0, 0, 0);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->num_blocks, 2048);
  EXPECT_EQ(s->window_blocks, 208 + 474);
  EXPECT_DOUBLE_EQ(s->window_mib, (208 + 474) * 0.375);
  // 1024 sequences' windows (3888 MiB) do not fit: every position kept, and the log says why.
  f.window_kv = true;
  f.max_num_seqs = 1024;
  auto many = plan_kv_budget(*c, f, 0, 0, 0);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->window_blocks, 0);
  EXPECT_EQ(many->num_blocks, 1365);
  bool said = false;
  for (const std::string& line : many->info) said = said || line.find("keep every position") != std::string::npos;
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace tessera::serve
