// The KV budget a node starts with: the arithmetic checked by hand on a llama-3.2-1B-shaped config (16 layers, 8 KV
// heads of 64: 2 * 16 * 512 * 2 bytes = 32 KiB per f16 token), the fraction of device memory less the weights,
// a shortened context with its warning, and the hybrid model's state taken first.
#include "serve/kv_budget.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera::serve
