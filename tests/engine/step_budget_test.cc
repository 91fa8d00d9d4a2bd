// What keeps serving's inter-token time low (issue 16): a step never exceeds its token budget and running
// streams decode in every step while a long prompt is prefilled beside them; the logits buffer is sized by the
// sequences a step can sample, not by the token budget; and an idle engine gathers a burst of arrivals into one
// step (EngineOptions::admission_window) so that their streams decode in step afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "model/loader.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

TEST(StepBudget, NoStepExceedsTheBudgetAndDecodesProgressDuringALongPrefill) {
  auto device = std::move(ops::open_device("ref").value());
  auto c = model::synth_shape("tiny");
  c->n_layers = 1;
  auto kv = std::move(KvCache::create(*device, *c, {.block_tokens = 4, .num_blocks = 400}).value());
  const int budget = 32;
  Scheduler sched(*kv, {.max_batch_tokens = budget, .max_running = 8});
  std::vector<std::unique_ptr<Sequence>> seqs;
  auto add = [&](int prompt_len) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<SequenceId>(seqs.size());
    s->arrival = seqs.size();
    for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(1 + i % 200);
    s->prompt_len = prompt_len;
    EXPECT_TRUE(sched.add(s.get()).ok());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  };
  auto run = [&](const Schedule& s) {
    int tokens = 0;
    for (const ScheduledChunk& ch : s.chunks) {
      tokens += ch.num_tokens;
      ch.seq->kv.length += ch.num_tokens;
      if (ch.seq->kv.length == static_cast<int>(ch.seq->tokens.size())) ch.seq->tokens.push_back(7);
    }
    sched.commit(s);
    return tokens;
  };
  std::vector<Sequence*> streams = {add(5), add(6), add(7)};
  while (std::any_of(streams.begin(), streams.end(), [](Sequence* s) { return s->generated() == 0; })) {
    ASSERT_LE(run(sched.schedule()), budget);
  }
  Sequence* longp = add(600);  // ~19 steps of prefill at this budget
  int steps = 0;
  while (longp->generated() == 0) {
    std::vector<int> before;
    for (Sequence* s : streams) before.push_back(s->generated());
    Schedule s = sched.schedule();
    ASSERT_LE(run(s), budget) << "step " << steps;
    for (size_t i = 0; i < streams.size(); ++i)
      EXPECT_EQ(streams[i]->generated(), before[i] + 1) << "stream " << i << " stalled in step " << steps;
    ++steps;
  }
  EXPECT_GE(steps, 600 / budget) << "the long prompt was chunked, not computed in one oversized step";
}

TEST(StepBudget, ImportedSequencesBeyondTheStepLimitWaitInsteadOfOverflowingAStep) {
  auto device = std::move(ops::open_device("ref").value());
  auto c = model::synth_shape("tiny");
  c->n_layers = 1;
  auto kv = std::move(KvCache::create(*device, *c, {.block_tokens = 4, .num_blocks = 100}).value());
  Scheduler sched(*kv, {.max_batch_tokens = 64, .max_running = 2, .max_step_sequences = 2});
  // Five sequences whose KV came from a prefill node join the running set past max_running, each decoding.
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 5; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<SequenceId>(i);
    s->arrival = static_cast<uint64_t>(i);
    s->tokens = {1, 2, 3, 4};
    s->prompt_len = 3;
    ASSERT_TRUE(kv->reserve(s->kv, 3).ok());
    s->kv.length = 3;
    sched.add_running(s.get());
    seqs.push_back(std::move(s));
  }
  Schedule s = sched.schedule();
  EXPECT_EQ(s.chunks.size(), 2u) << "never more sequences in a step than the runner can sample";
}

class LogitRows : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = std::move(ops::open_device("ref").value());
    auto c = model::synth_shape("tiny");
    c->n_layers = 1;
    c->max_seq_len = 64;
    model_ = model::synthesize_weights(*c, 5);
  }
  std::unique_ptr<ModelRunner> make(int max_batch_tokens, int max_logit_rows) {
    RunnerOptions o;
    o.max_batch_tokens = max_batch_tokens;
    o.max_logit_rows = max_logit_rows;
    o.kv.block_tokens = 4;
    o.max_sequences = 8;
    auto r = ModelRunner::create(*device_, model_.config, model_.weights, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::unique_ptr<ops::Device> device_;
  model::SynthModel model_;
};

TEST_F(LogitRows, AStepSamplesUpToTheLimitAndABiggerOneIsAClearError) {
  auto wide = make(64, 0);  // logits for every one of the 64 rows: the reference
  auto narrow = make(64, 3);
  ASSERT_TRUE(wide && narrow);
  const std::vector<TokenId> prompt = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37};
  // Four sequences prefilled in one step of 40 tokens: 4 logit rows, what 3 rounds up to (a power of two).
  std::vector<SequenceKv> w(5), n(5);
  std::vector<Segment> ws, ns;
  for (int i = 0; i < 4; ++i) {
    ws.push_back({&w[static_cast<size_t>(i)], prompt, true});
    ns.push_back({&n[static_cast<size_t>(i)], prompt, true});
  }
  std::vector<float> want, got;
  ASSERT_TRUE(wide->step(ws, want).ok());
  Status st = narrow->step(ns, got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(got, want) << "a smaller logits buffer changes no number";
  // A fifth sampled sequence does not fit: refused before anything runs, not a write past the buffer.
  for (auto& s : n) s = SequenceKv{};
  ns.push_back({&n[4], prompt, true});
  st = narrow->step(ns, got);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("logit rows"), std::string::npos) << st.message();
  for (const auto& s : n) EXPECT_EQ(s.length, 0) << "a refused step changes no sequence";
  // Prompt chunks that want no logits do not count.
  for (auto& s : ns) s.want_logits = false;
  ns[0].want_logits = true;
  EXPECT_TRUE(narrow->step(ns, got).ok());
}

TEST_F(LogitRows, NegativeIsRefusedAtCreation) {
  RunnerOptions o;
  o.max_logit_rows = -1;
  auto r = ModelRunner::create(*device_, model_.config, model_.weights, o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

class AdmissionWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    model_ = std::move(model::load_model(testing::stories260k_dir()).value());
    device_ = std::move(ops::open_device("ref").value());
  }
  void start(int max_running, std::chrono::milliseconds window, std::chrono::milliseconds gap) {
    RunnerOptions ro;
    ro.max_batch_tokens = 256;
    ro.kv.block_tokens = 16;
    ro.kv.num_blocks = 128;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    EngineOptions eo;
    eo.scheduler = {.max_batch_tokens = 256, .max_running = max_running};
    eo.admission_window = window;
    eo.admission_gap = gap;
    engine_ = std::make_unique<Engine>(*runner_, *model_.tokenizer, eo);
    engine_->start();
  }
  struct Seen {
    uint64_t first_step = 0;  // steps published before this request's first token came out
    std::chrono::steady_clock::time_point first_token;
  };
  std::future<Seen> submit(const std::string& prompt) {
    GenerationRequest r;
    r.prompt = model_.tokenizer->encode(prompt, true);
    r.sampling.temperature = 0;
    r.max_tokens = 4;
    r.ignore_eos = true;
    auto done = std::make_shared<std::promise<Seen>>();
    auto seen = std::make_shared<Seen>();
    auto first = std::make_shared<bool>(true);
    Engine* e = engine_.get();
    auto id = engine_->submit(std::move(r), [=](const RequestOutput& o) {
      if (*first && !o.tokens.empty()) {
        *first = false;
        seen->first_step = e->stats().steps;
        seen->first_token = std::chrono::steady_clock::now();
      }
      if (o.finish != FinishReason::kNone) done->set_value(*seen);
    });
    EXPECT_TRUE(id.ok());
    return done->get_future();
  }
  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(AdmissionWindow, ABurstReachingAnIdleEngineIsPrefilledInOneStep) {
  // A long window that ends as soon as the 4 slots are taken: the test would take 20 s if it did not.
  start(4, std::chrono::milliseconds(20000), std::chrono::milliseconds(20000));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<Seen>> f;
  for (const char* p : {"Once upon a time", "The cat sat", "Lily went to the park", "One day"}) {
    f.push_back(submit(p));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // far longer than a step of this model
  }
  std::vector<Seen> seen;
  for (auto& x : f) seen.push_back(x.get());
  for (size_t i = 1; i < seen.size(); ++i)
    EXPECT_EQ(seen[i].first_step, seen[0].first_step) << "request " << i << " was prefilled in a later step";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the window did not end when full";
}

TEST_F(AdmissionWindow, WithoutAWindowTheSameBurstIsPrefilledOneByOne) {
  // The control: what the window changes (so the test above can fail).
  start(4, std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  std::vector<std::future<Seen>> f;
  for (const char* p : {"Once upon a time", "The cat sat", "Lily went to the park", "One day"}) {
    f.push_back(submit(p));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  std::vector<Seen> seen;
  for (auto& x : f) seen.push_back(x.get());
  EXPECT_LT(seen[0].first_step, seen[3].first_step);
}

TEST_F(AdmissionWindow, ALoneRequestWaitsOneGapAndAStreamOfArrivalsAtMostTheWindow) {
  start(4, std::chrono::milliseconds(1500), std::chrono::milliseconds(300));
  auto t0 = std::chrono::steady_clock::now();
  Seen s = submit("Once upon a time").get();
  auto waited = s.first_token - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(300)) << "a free slot was left: the engine should have waited a gap";
  EXPECT_LT(waited, std::chrono::milliseconds(1500)) << "nothing else came: one gap, not the whole window";
  // A second arrival within the gap renews it: the first request's first token comes after both gaps.
  t0 = std::chrono::steady_clock::now();
  std::future<Seen> first = submit("The cat sat");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::future<Seen> second = submit("One day");
  waited = first.get().first_token - t0;
  second.get();
  EXPECT_GE(waited, std::chrono::milliseconds(500)) << "the second arrival renewed the gap";
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST_F(AdmissionWindow, ArrivalsThatKeepComingAreCutOffByTheWindow) {
  start(16, std::chrono::milliseconds(400), std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<Seen>> f;
  for (int i = 0; i < 10; ++i) {  // one every 150 ms: each within the gap of the last, for 1350 ms
    f.push_back(submit("Once upon a time"));
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  std::vector<Seen> seen;
  for (auto& x : f) seen.push_back(x.get());
  EXPECT_LT(seen[0].first_token - t0, std::chrono::milliseconds(1100)) << "the window (400 ms) ends the wait";
  EXPECT_LT(seen[0].first_step, seen[9].first_step) << "the last arrivals came after the window: a later step";
}

}  // namespace
}  // namespace tessera::engine
