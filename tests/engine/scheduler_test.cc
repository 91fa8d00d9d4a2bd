// The scheduler alone: values in, values out, no device work (the KV cache's tensors exist but are unused).
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  void make(int num_blocks, SchedulerOptions o, int block_tokens = 4) {
    auto device = ops::open_device("ref");
    device_ = std::move(device).value();
    auto c = model::synth_shape("tiny");
    c->n_layers = 1;
    kv_ = std::move(KvCache::create(*device_, *c, {.block_tokens = block_tokens, .num_blocks = num_blocks}).value());
    sched_ = std::make_unique<Scheduler>(*kv_, o);
  }
  Sequence* seq(int prompt_len, int first_token = 1) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<SequenceId>(seqs_.size());
    s->arrival = seqs_.size();
    for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(first_token + i);
    s->prompt_len = prompt_len;
    seqs_.push_back(std::move(s));
    EXPECT_TRUE(sched_->add(seqs_.back().get()).ok());
    return seqs_.back().get();
  }
  // What the engine does after a step: mark the chunk computed, append a sampled token when logits came.
  void run(const Schedule& s) {
    for (const ScheduledChunk& c : s.chunks) {
      c.seq->kv.length += c.num_tokens;
      if (c.seq->kv.length == static_cast<int>(c.seq->tokens.size())) c.seq->tokens.push_back(99);
    }
    sched_->commit(s);
  }
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_F(SchedulerTest, LongPromptsArePrefilledInChunksWithinTheBudget) {
  make(100, {.max_batch_tokens = 8});
  Sequence* a = seq(20);
  std::vector<int> chunks;
  for (int step = 0; step < 3; ++step) {
    Schedule s = sched_->schedule();
    ASSERT_EQ(s.chunks.size(), 1u);
    chunks.push_back(s.chunks[0].num_tokens);
    run(s);
  }
  EXPECT_EQ(chunks, (std::vector<int>{8, 8, 4}));
  EXPECT_EQ(a->generated(), 1);
  Schedule decode = sched_->schedule();
  ASSERT_EQ(decode.chunks.size(), 1u);
  EXPECT_EQ(decode.chunks[0].num_tokens, 1);
}

TEST_F(SchedulerTest, DecodesComeBeforeNewPromptsAndShareTheStep) {
  make(100, {.max_batch_tokens = 6});
  Sequence* a = seq(3);
  run(sched_->schedule());  // a prefilled, now decoding
  Sequence* b = seq(10);
  Schedule s = sched_->schedule();
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[0].seq, a);
  EXPECT_EQ(s.chunks[0].num_tokens, 1);
  EXPECT_EQ(s.chunks[1].seq, b);
  EXPECT_EQ(s.chunks[1].num_tokens, 5);  // the rest of the budget
}

TEST_F(SchedulerTest, AdmissionIsFirstComeFirstServed) {
  make(6, {.max_batch_tokens = 64});  // 24 token slots
  Sequence* big = seq(20);
  Sequence* small = seq(2);
  Sequence* a = seq(12);    // does not fit next to big
  Sequence* tiny = seq(1);  // would fit, but must not overtake `a`
  Schedule s = sched_->schedule();
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[0].seq, big);
  EXPECT_EQ(s.chunks[1].seq, small);
  EXPECT_EQ(sched_->waiting(), 2);
  (void)a;
  (void)tiny;
}

TEST_F(SchedulerTest, RunningOutOfBlocksPreemptsTheNewestAndItComesBackFirst) {
  make(4, {.max_batch_tokens = 64});  // 16 token slots
  Sequence* a = seq(7);
  Sequence* b = seq(8);
  run(sched_->schedule());  // both prefilled: 2 blocks each, the cache is full; a has 8 tokens, b 9
  EXPECT_EQ(kv_->blocks().available(), 0);
  Schedule s = sched_->schedule();  // a's next position fits its blocks; b needs a 3rd: b, the newest, yields
  ASSERT_EQ(s.preempted.size(), 1u);
  EXPECT_EQ(s.preempted[0], b);
  EXPECT_EQ(b->kv.length, 0);
  EXPECT_EQ(b->preemptions, 1);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].seq, a);
  EXPECT_EQ(sched_->waiting(), 1);
  // When a finishes, b is recomputed: prompt plus the token it had generated, from its cached blocks.
  run(s);
  sched_->remove(a);
  Schedule again = sched_->schedule();
  ASSERT_EQ(again.chunks.size(), 1u);
  EXPECT_EQ(again.chunks[0].seq, b);
  EXPECT_EQ(b->kv.length, 8) << "b's two full blocks were still in the prefix cache";
  EXPECT_EQ(again.chunks[0].num_tokens, 1);
}

TEST_F(SchedulerTest, APromptLargerThanTheCacheIsRejectedNotQueuedForever) {
  make(2, {.max_batch_tokens = 64});
  Sequence* huge = seq(9);
  Sequence* ok = seq(3);
  Schedule s = sched_->schedule();
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_EQ(s.rejected[0], huge);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].seq, ok);
}

TEST_F(SchedulerTest, PrefixCacheSkipsSharedFullBlocks) {
  make(20, {.max_batch_tokens = 64});
  Sequence* a = seq(10);
  run(sched_->schedule());
  Sequence* b = seq(10);  // same tokens
  Schedule s = sched_->schedule();
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[1].seq, b);
  EXPECT_EQ(s.chunks[1].num_tokens, 2) << "8 of 10 prompt tokens came from the cache";
  EXPECT_EQ(b->kv.blocks[0], a->kv.blocks[0]);
}

TEST_F(SchedulerTest, QueueLimit) {
  make(10, {.max_batch_tokens = 8, .max_running = 1, .max_waiting = 2});
  seq(2);
  seq(2);
  auto extra = std::make_unique<Sequence>();
  Status st = sched_->add(extra.get());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tessera::engine
