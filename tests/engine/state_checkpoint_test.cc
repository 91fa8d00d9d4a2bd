// Prefix reuse for hybrid models (Qwen3.5) through state checkpoints (engine/kv_cache.h): the recurrent state of a
// prompt at its last block boundary, taken inside the step that passes it, and restored into the slot of a later
// prompt that starts with those blocks. The reference is the same model served without prefix reuse (every prompt
// computed from position 0): greedy tokens equal, the chosen tokens' logprobs within 1e-4, and the cached-token
// counts a user sees in `usage.prompt_tokens_details.cached_tokens`.
#include <future>
#include <memory>
#include <numeric>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/hybrid_model.h"

namespace tessera::engine {
namespace {

std::vector<model::TokenId> tokens(int n, int from) { return testing::token_run(n, from); }

class HybridPrefix : public testing::HybridModelTest {
 protected:
  struct Served {
    std::unique_ptr<ModelRunner> runner;
    std::unique_ptr<Engine> engine;
  };
  // checkpoints 0: no prefix reuse (the reference).
  Served start(int checkpoints, int max_batch_tokens = 16, int max_sequences = 4) {
    Served s;
    RunnerOptions ro;
    ro.max_batch_tokens = max_batch_tokens;
    ro.max_sequences = max_sequences;
    ro.kv.block_tokens = 4;
    ro.kv.num_blocks = 256;
    ro.kv.state_checkpoints = checkpoints;
    s.runner = std::move(ModelRunner::create(*device_, model_->config, model_->weights, ro).value());
    EngineOptions eo;
    eo.scheduler.max_batch_tokens = max_batch_tokens;
    eo.scheduler.max_running = max_sequences;
    s.engine = std::make_unique<Engine>(*s.runner, *tokenizer_, eo);
    s.engine->start();
    return s;
  }
};

// One after another: a prompt sent again, a longer turn of the same conversation and a prompt that parts from it
// early go on from the checkpoint (or from none) to the reference's tokens and logprobs.
TEST_F(HybridPrefix, HitsGoOnFromTheCheckpointAsTheWholePromptWould) {
  const std::vector<model::TokenId> shared = tokens(41, 300);  // checkpoint at 40: the last boundary before token 41
  std::vector<model::TokenId> longer = shared;                 // the next turn: the prompt, its answer, a question
  for (int i = 0; i < 14; ++i) longer.push_back(static_cast<model::TokenId>(100 + 7 * i));
  std::vector<model::TokenId> other = tokens(29, 300);  // parts from `shared` after 29 tokens; its checkpoint at 36
  std::vector<model::TokenId> sibling = other;          // as `other`, parting after 29 tokens too (a shared
  for (int i = 0; i < 9; ++i) {                         // system prompt, then another user's message)
    other.push_back(static_cast<model::TokenId>(470 + i));
    sibling.push_back(static_cast<model::TokenId>(480 + i));
  }
  const std::vector<std::vector<model::TokenId>> prompts = {shared, shared, longer, other, other, sibling};
  std::vector<Out> want;
  {
    Served ref = start(0);
    EXPECT_FALSE(ref.runner->kv_cache().blocks().prefix_cache_enabled());
    for (const auto& p : prompts) want.push_back(submit(*ref.engine, p).get());
    for (const Out& o : want) ASSERT_TRUE(o.ok && o.tokens.size() == 12);
  }
  Served s = start(4);
  KvCache& kv = s.runner->kv_cache();
  EXPECT_TRUE(kv.blocks().prefix_cache_enabled());
  EXPECT_EQ(kv.state_checkpoints(), 4);
  // The cached positions of each: none (cold); 40 (its own checkpoint); 40 (the first turn's); none (its first 28
  // tokens' blocks are cached, but no state was kept at 28: it takes one there as it passes); 36 (its own); 28 (the
  // state `other` took where it parted from `shared`).
  const std::vector<int> cached = {0, 40, 40, 0, 36, 28};
  for (size_t i = 0; i < prompts.size(); ++i) {
    Out got = submit(*s.engine, prompts[i]).get();
    expect_same(got, want[i], "prompt " + std::to_string(i));
    EXPECT_EQ(got.cached, cached[i]) << "prompt " << i;
  }
  // Five were taken (40 of `shared`, 52 of `longer`, 28 and 36 of `other`, 36 of `sibling`) in four: the least
  // recently used, `shared`'s, went last; `shared` now goes on from the one at 28.
  EXPECT_EQ(kv.state_checkpoints_held(), 4);
  SequenceKv probe;
  EXPECT_EQ(kv.match_prefix(probe, shared, 40), 28);
  kv.release(probe);
  const EngineStats st = s.engine->stats();
  EXPECT_TRUE(st.prefix_cache_enabled);
  EXPECT_EQ(st.state_checkpoints_total, 4);
  EXPECT_EQ(st.state_checkpoints_used, 4);
  EXPECT_EQ(kv.free_state_slots(), 4);  // every slot back
}

// The next turn of a conversation (the prompt, the reply, a new message) goes on from the state its first turn's
// decode kept at the last block boundary it crossed (a running checkpoint: 52 of the 41 + 11 positions it computed),
// and a third turn from the second's. The next prompt's pass over the reply's blocks takes no checkpoint of its own
// (one at every such point would push the ones that serve out of the LRU): kept are each turn's prompt end and the
// reply's last boundary. Without running checkpoints (one checkpoint: none may run) a turn goes on from the last
// prompt's end.
TEST_F(HybridPrefix, TheNextTurnOfAConversationGoesOnFromTheReply) {
  const std::vector<model::TokenId> first = tokens(41, 300);
  std::vector<Out> want;
  std::vector<std::vector<model::TokenId>> turns = {first};
  {
    Served ref = start(0);
    for (int t = 0; t < 3; ++t) {
      want.push_back(submit(*ref.engine, turns.back()).get());
      ASSERT_TRUE(want.back().ok);
      std::vector<model::TokenId> next = turns.back();  // the prompt, its reply, a new message
      next.insert(next.end(), want.back().tokens.begin(), want.back().tokens.end());
      for (model::TokenId m : tokens(10, 60 + 20 * t)) next.push_back(m);
      turns.push_back(std::move(next));
    }
  }
  turns.pop_back();
  // Turn 2 (63 tokens) after 41 + 11 computed: 52; turn 3 (85 tokens) after 63 + 11: 72.
  for (int checkpoints : {8, 1}) {
    Served s = start(checkpoints);
    const std::vector<int> cached = checkpoints == 8 ? std::vector<int>{0, 52, 72} : std::vector<int>{0, 40, 60};
    for (size_t t = 0; t < turns.size(); ++t) {
      Out got = submit(*s.engine, turns[t]).get();
      expect_same(got, want[t], "turn " + std::to_string(t + 1));
      EXPECT_EQ(got.cached, cached[t]) << checkpoints << " checkpoints, turn " << t + 1;
    }
    if (checkpoints == 8)  // 40, 52 (turn 1), 60, 72 (turn 2), 84, 96 (turn 3); none at 52 or 72 from the prompts
      EXPECT_EQ(s.runner->kv_cache().state_checkpoints_held(), 6);
    EXPECT_EQ(s.runner->kv_cache().running_checkpoints(), 0);  // every sequence ended
  }
}

// A request's hint (serve passes the end of a chat's system prompt) keeps the state there as the prompt passes it:
// the next prompt with the same start, another user's, goes on from it. Without the hint that prompt finds blocks
// but no state (it then takes one where it parts, for the third user).
TEST_F(HybridPrefix, AHintKeepsTheStateForTheFirstPromptSharingTheStart) {
  const std::vector<model::TokenId> system = tokens(30, 300);
  std::vector<model::TokenId> one = system, two = system;
  for (model::TokenId t : tokens(9, 400)) one.push_back(t);
  for (model::TokenId t : tokens(9, 420)) two.push_back(t);
  std::vector<Out> want;
  {
    Served ref = start(0);
    for (const auto& p : {one, two}) want.push_back(submit(*ref.engine, p).get());
  }
  for (int hint : {30, 0}) {
    Served s = start(8);
    const std::string what = hint > 0 ? "with the hint" : "without";
    Out a = submit(*s.engine, one, hint).get();
    expect_same(a, want[0], "first user, " + what);
    EXPECT_EQ(a.cached, 0);
    Out b = submit(*s.engine, two, hint).get();
    expect_same(b, want[1], "second user, " + what);
    EXPECT_EQ(b.cached, hint > 0 ? 28 : 0) << what;  // the block boundary at or before the hint
  }
}

// One chunk may take three checkpoints, in position order whatever the order of their reasons: the hint's (8),
// where the prompt parts from another cached prompt (12) and the prompt's end (36). Each serves a later prompt that
// goes on from there.
TEST_F(HybridPrefix, OneChunkTakesTheHintsThePartingAndTheEndsCheckpoints) {
  const std::vector<model::TokenId> other = tokens(20, 300);  // cached first; its end's checkpoint at 16
  std::vector<model::TokenId> prompt = tokens(13, 300);       // parts from `other` after 13 tokens
  for (model::TokenId t : tokens(27, 400)) prompt.push_back(t);
  auto from = [&](int n, model::TokenId first) {
    std::vector<model::TokenId> p(prompt.begin(), prompt.begin() + n);
    for (model::TokenId t : tokens(5, first)) p.push_back(t);
    return p;
  };
  const std::vector<std::vector<model::TokenId>> prompts = {other, prompt, from(10, 460), from(14, 470), prompt};
  std::vector<Out> want;
  {
    Served ref = start(0, 64);
    for (const auto& p : prompts) want.push_back(submit(*ref.engine, p).get());
  }
  Served s = start(16, 64);  // 40 tokens: one chunk; room for the replies' checkpoints too
  const std::vector<int> cached = {0, 0, 8, 12, 36};
  for (size_t i = 0; i < prompts.size(); ++i) {
    Out got = submit(*s.engine, prompts[i], i == 1 ? 9 : 0).get();
    expect_same(got, want[i], "prompt " + std::to_string(i));
    EXPECT_EQ(got.cached, cached[i]) << "prompt " << i;
  }
}

// Two checkpoints for three prompts: the least recently used goes, and its prompt is then computed whole (still
// the reference's tokens); prompts sent at once, two of them the same, share a checkpoint filled in one step. One
// token each, so that no decode takes a running checkpoint.
TEST_F(HybridPrefix, TheLeastRecentlyUsedCheckpointGoesAndConcurrentPromptsShareOne) {
  const std::vector<std::vector<model::TokenId>> prompts = {tokens(23, 10), tokens(30, 200), tokens(18, 400)};
  auto submit = [](Engine& e, const std::vector<model::TokenId>& p) { return HybridModelTest::submit(e, p, 0, 1); };
  std::vector<Out> want;
  {
    Served ref = start(0);
    for (const auto& p : prompts) want.push_back(submit(*ref.engine, p).get());
  }
  Served s = start(2);
  KvCache& kv = s.runner->kv_cache();
  for (size_t i = 0; i < prompts.size(); ++i) expect_same(submit(*s.engine, prompts[i]).get(), want[i], "cold");
  EXPECT_EQ(kv.state_checkpoints_held(), 2);
  Out first = submit(*s.engine, prompts[0]).get();  // its checkpoint went for the third prompt's
  expect_same(first, want[0], "evicted");
  EXPECT_EQ(first.cached, 0);
  Out third = submit(*s.engine, prompts[2]).get();
  expect_same(third, want[2], "kept");
  EXPECT_EQ(third.cached, 16);

  // Steps of 64 tokens: both copies of the second prompt in the first step, each passing its checkpoint there.
  Served t = start(2, 64);
  std::vector<std::future<Out>> at_once;
  for (int i : {1, 1, 0}) at_once.push_back(submit(*t.engine, prompts[static_cast<size_t>(i)]));
  for (size_t i = 0; i < at_once.size(); ++i) expect_same(at_once[i].get(), want[i < 2 ? 1 : 0], "at once");
  EXPECT_EQ(t.runner->kv_cache().state_checkpoints_held(), 2);
  Out again = submit(*t.engine, prompts[1]).get();
  expect_same(again, want[1], "after the shared fill");
  EXPECT_EQ(again.cached, 28);
}

// The bookkeeping alone: a checkpoint being filled is never matched nor given to another prefix, one held for a
// restore is never given back, and a step that failed leaves nothing behind.
TEST(StateCheckpoints, FillingAndHeldCheckpointsAreNeitherMatchedNorTaken) {
  auto c = model::synth_shape_small("qwen3.5-0.8b");
  ASSERT_TRUE(c.ok());
  auto device = ops::open_device("ref").value();
  auto made =
      KvCache::create(*device, *c, {.block_tokens = 4, .num_blocks = 32, .state_slots = 2, .state_checkpoints = 1});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  KvCache& kv = **made;
  const std::vector<model::TokenId> prompt = tokens(9, 1);
  const BlockHash h = BlockManager::chain_hashes(prompt, 4, 2).back();
  // The blocks of 8 positions, cached.
  SequenceKv a;
  ASSERT_TRUE(kv.reserve(a, 9).ok());
  for (size_t i = 0; i < 2; ++i) kv.register_full_block(a, i, BlockManager::chain_hashes(prompt, 4, 2)[i]);
  uint8_t* buf = kv.checkpoint_buffer(h);
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(kv.checkpoint_buffer(h), buf);          // the same prefix in the same step
  EXPECT_EQ(kv.checkpoint_buffer(h + 1), nullptr);  // the only one is being filled
  SequenceKv b;
  EXPECT_EQ(kv.match_prefix(b, prompt, 8), 0);  // not written yet
  kv.checkpoint_written(h, false);              // the step failed
  EXPECT_EQ(kv.state_checkpoints_held(), 0);
  EXPECT_EQ(kv.match_prefix(b, prompt, 8), 0);
  ASSERT_EQ(kv.checkpoint_buffer(h), buf);
  kv.checkpoint_written(h, true);
  EXPECT_EQ(kv.state_checkpoints_held(), 1);
  EXPECT_EQ(kv.checkpoint_buffer(h), nullptr);  // kept already
  EXPECT_EQ(kv.match_prefix(b, prompt, 8), 8);
  EXPECT_EQ(kv.pending_restore(b), buf);
  EXPECT_EQ(kv.checkpoint_buffer(h + 1), nullptr);  // held for b's restore
  ASSERT_TRUE(kv.reserve(b, 9).ok());               // a slot for positions that come with a state
  EXPECT_GE(b.state_slot, 0);
  kv.restored(b);
  EXPECT_EQ(kv.pending_restore(b), nullptr);
  EXPECT_NE(kv.checkpoint_buffer(h + 1), nullptr);  // free to go now
  kv.checkpoint_written(h + 1, true);
  SequenceKv d;
  EXPECT_EQ(kv.match_prefix(d, prompt, 8), 0);  // h's state is gone
  kv.release(a);
  kv.release(b);
}

// Running checkpoints, the bookkeeping alone: a sequence's next one takes its last one's buffer (not given to the
// second level: it goes further); prompts' checkpoints never take a live sequence's; beyond half the checkpoints a
// running one takes only an empty one or one moved to the back (a prompt's end, once its reply's state is taken),
// never a kept state; a reply that comes back as its tokens keeps its state, one that does not gives it back; a
// prompt restoring either of such a pair moves both back; one it restores stays when its sequence goes on; the same
// tokens run again give seq's own back.
TEST(StateCheckpoints, RunningCheckpointsReplaceTheirOwnAndEndWithTheReply) {
  auto c = model::synth_shape_small("qwen3.5-0.8b");
  ASSERT_TRUE(c.ok());
  auto device = ops::open_device("ref").value();
  auto made =
      KvCache::create(*device, *c, {.block_tokens = 4, .num_blocks = 32, .state_slots = 2, .state_checkpoints = 4});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  KvCache& kv = **made;
  EXPECT_TRUE(kv.keeps_reply_states());  // two per sequence that may run
  std::vector<BlockHash> spilled;
  kv.set_checkpoint_spill([&](BlockHash h, std::span<const uint8_t>) { spilled.push_back(h); },
                          [](BlockHash) { return std::shared_ptr<const uint8_t>(); });
  auto fill = [&](uint8_t* buf, BlockHash h) {
    if (buf != nullptr) kv.checkpoint_written(h, true);
    return buf;
  };
  using Hashes = std::vector<BlockHash>;
  SequenceKv a, b, d, e;
  // Another prompt's end (99), a's prompt end (100) and its reply's boundaries (101, then 102 in the same buffer).
  ASSERT_NE(fill(kv.checkpoint_buffer(99), 99), nullptr);
  ASSERT_NE(fill(kv.checkpoint_buffer(100), 100), nullptr);
  uint8_t* first = fill(kv.running_checkpoint_buffer(a, 101, 44, 100), 101);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(fill(kv.running_checkpoint_buffer(a, 102, 48, 100), 102), first);
  EXPECT_EQ(kv.checkpoint(101), nullptr);
  EXPECT_EQ(kv.checkpoint(102), first);
  EXPECT_TRUE(spilled.empty());  // 101 went without a copy
  EXPECT_EQ(a.running_position, 48);
  // b runs too: two of four. Beyond that d takes a's prompt end (moved back when a's reply state was taken), and e
  // finds only a kept state (99).
  ASSERT_NE(fill(kv.running_checkpoint_buffer(b, 201, 20, 0), 201), nullptr);
  EXPECT_EQ(kv.running_checkpoints(), 2);
  ASSERT_NE(fill(kv.running_checkpoint_buffer(d, 301, 20, 0), 301), nullptr);
  EXPECT_EQ(spilled, Hashes{100});
  EXPECT_EQ(kv.running_checkpoints(), 3);
  EXPECT_EQ(kv.running_checkpoint_buffer(e, 401, 20, 0), nullptr);
  // a's reply comes back as its tokens: its state stays (below).
  kv.end_reply(a, true);
  // b's reply does not come back as its tokens: its state goes, without a copy, and its buffer is free.
  kv.end_reply(b, false);
  kv.release(b);
  EXPECT_EQ(kv.checkpoint(201), nullptr);
  ASSERT_NE(fill(kv.checkpoint_buffer(500), 500), nullptr);
  EXPECT_EQ(spilled, Hashes{100});
  // Prompts' checkpoints never take a running one; a ended, its last one stays as any other.
  ASSERT_NE(fill(kv.checkpoint_buffer(501), 501), nullptr);
  EXPECT_EQ(spilled, (Hashes{100, 99}));
  kv.release(a);
  EXPECT_NE(kv.checkpoint(102), nullptr);
  EXPECT_EQ(kv.running_checkpoints(), 1);
  // A pair: a prompt's end (h[0]) and d's reply state after it (h[1]). A prompt restoring the reply's state moves
  // both back: d's next one takes h[0]'s buffer, and h[1], held for the restore, stays.
  std::vector<model::TokenId> prompt = tokens(9, 1);
  const std::vector<BlockHash> h = BlockManager::chain_hashes(prompt, 4, 2);
  SequenceKv owner, reader;
  ASSERT_TRUE(kv.reserve(owner, 9).ok());
  for (size_t i = 0; i < 2; ++i) kv.register_full_block(owner, i, h[i]);
  kv.release(d);
  ASSERT_NE(fill(kv.checkpoint_buffer(h[0]), h[0]), nullptr);
  ASSERT_NE(fill(kv.running_checkpoint_buffer(d, h[1], 8, h[0]), h[1]), nullptr);
  const size_t before = spilled.size();
  EXPECT_EQ(kv.match_prefix(reader, prompt, 8), 8);
  ASSERT_NE(fill(kv.running_checkpoint_buffer(d, 303, 12, h[0]), 303), nullptr);
  EXPECT_EQ(spilled.size(), before + 1);
  EXPECT_EQ(spilled.back(), h[0]);
  EXPECT_NE(kv.checkpoint(h[1]), nullptr);
  kv.restored(reader);
  for (SequenceKv* s : {&d, &owner, &reader}) kv.release(*s);
  EXPECT_EQ(kv.running_checkpoints(), 0);
  ASSERT_NE(fill(kv.checkpoint_buffer(700), 700), nullptr);  // the restored one goes first
  EXPECT_EQ(spilled.back(), h[1]);
  // The same tokens ran before (700 is kept): e's own one goes, without a copy, and none is filled.
  ASSERT_NE(fill(kv.running_checkpoint_buffer(e, 601, 20, 0), 601), nullptr);
  const size_t copies = spilled.size();
  EXPECT_EQ(kv.running_checkpoint_buffer(e, 700, 24, 0), nullptr);
  EXPECT_EQ(kv.checkpoint(601), nullptr);
  EXPECT_NE(kv.checkpoint(700), nullptr);
  EXPECT_EQ(spilled.size(), copies);
  EXPECT_EQ(kv.running_checkpoints(), 0);
  kv.release(e);

  // Fewer than two checkpoints per sequence that may run: none is taken, though every checkpoint is free.
  auto few =
      KvCache::create(*device, *c, {.block_tokens = 4, .num_blocks = 32, .state_slots = 4, .state_checkpoints = 7});
  ASSERT_TRUE(few.ok());
  EXPECT_FALSE((*few)->keeps_reply_states());
  SequenceKv f;
  EXPECT_EQ((*few)->running_checkpoint_buffer(f, 801, 20, 0), nullptr);
  EXPECT_NE((*few)->checkpoint_buffer(801), nullptr);  // a prompt's checkpoint still is
}

}  // namespace
}  // namespace tessera::engine
