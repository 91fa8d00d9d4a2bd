// PdService owns its threads: shutting it down with prefill calls and KV transfers in flight ends them and
// joins every thread it started (the process's thread count comes back to where it was), promptly (the calls
// are abandoned, not waited out: the transfer timeout here is a minute), and every request still gets its
// answer. And a prefill node that shuts down under its callers loses none of their requests: they finish
// locally with the text a single node gives.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "http/http.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "serve/pd.h"
#include "support/paths.h"

namespace tessera::serve {
namespace {

using Clock = std::chrono::steady_clock;

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// One node: a runner and an engine on the reference backend, and its PD service.
struct Node {
  std::unique_ptr<ops::Device> device;
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<PdService> pd;
};

class PdShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    baseline_threads_ = thread_count();
  }
  Node make_node(const std::string& role, std::vector<std::string> prefill_urls = {}) {
    Node n;
    n.device = std::move(ops::open_device("ref").value());
    engine::RunnerOptions ro;
    ro.max_batch_tokens = 128;
    ro.kv.num_blocks = 256;
    n.runner = std::move(engine::ModelRunner::create(*n.device, model_.config, model_.weights, ro).value());
    engine::EngineOptions eo;
    eo.scheduler.max_batch_tokens = 128;
    n.engine = std::make_unique<engine::Engine>(*n.runner, *model_.tokenizer, eo);
    n.engine->start();
    PdOptions po;
    po.role = role;
    po.model_name = "stories260K";
    po.prefill_urls = std::move(prefill_urls);
    po.min_remote_tokens = 1;
    po.staging_bytes = 64u << 20;
    po.transfer_timeout_ms = 60000;  // a shutdown that waited the calls out would take a minute
    po.link_endpoints = {"tcp"};
    n.pd = std::move(PdService::create(*n.engine, po).value());
    return n;
  }
  std::vector<int32_t> prompt(uint32_t seed, int n) const {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> d(3, model_.config.vocab_size - 1);
    std::vector<int32_t> p = {1};
    while (static_cast<int>(p.size()) < n) p.push_back(d(gen));
    return p;
  }
  static engine::GenerationRequest greedy(std::vector<int32_t> p) {
    engine::GenerationRequest r;
    r.prompt = std::move(p);
    r.sampling.temperature = 0;
    r.max_tokens = 8;
    r.ignore_eos = true;
    return r;
  }

  // What one request saw: its start result and, when it started, its tokens.
  struct Outcome {
    std::mutex mu;
    int started = 0;
    Status start_status;
    std::vector<int32_t> tokens;
    std::promise<void> done;
    bool finished = false;
  };
  static void run(PdService& pd, engine::GenerationRequest r, const std::shared_ptr<Outcome>& o) {
    pd.generate(
        std::move(r),
        [o](const engine::RequestOutput& out) {
          std::lock_guard<std::mutex> lock(o->mu);
          o->tokens.insert(o->tokens.end(), out.tokens.begin(), out.tokens.end());
          if (out.finish != engine::FinishReason::kNone && !o->finished) {
            o->finished = true;
            o->done.set_value();
          }
        },
        [o](Result<engine::RequestId> id) {
          std::lock_guard<std::mutex> lock(o->mu);
          o->started++;
          o->start_status = id.status();
          if (!id.ok() && !o->finished) {
            o->finished = true;
            o->done.set_value();
          }
        },
        std::make_shared<std::atomic<bool>>(false));
  }

  model::LoadedModel model_;
  int baseline_threads_ = 0;
};

TEST_F(PdShutdownTest, JoinsEveryThreadWithTransfersInFlight) {
  {
    Node prefill = make_node("prefill");
    http::Server server({});
    prefill.pd->register_routes(server);
    ASSERT_TRUE(server.start().ok());
    Node decode = make_node("decode", {"http://127.0.0.1:" + std::to_string(server.port())});

    std::vector<std::shared_ptr<Outcome>> outcomes;
    for (uint32_t i = 0; i < 8; ++i) {
      outcomes.push_back(std::make_shared<Outcome>());
      run(*decode.pd, greedy(prompt(i, 300)), outcomes.back());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // calls out to the prefill node, KV moving

    const auto t0 = Clock::now();
    decode.engine->stop();
    decode.pd.reset();  // shutdown(): abandons the calls, joins its threads
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(seconds, 10.0) << "the shutdown waited the calls out instead of abandoning them";
    for (const auto& o : outcomes) {
      std::lock_guard<std::mutex> lock(o->mu);
      EXPECT_EQ(o->started, 1) << "every request gets exactly one start answer";
    }

    prefill.engine->stop();
    server.stop(1000);
    prefill.pd.reset();
  }
  // Every thread this test started (engines, servers, link agents, the services' own) has been joined.
  int now = thread_count();
  for (int i = 0; i < 100 && now > baseline_threads_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = thread_count();
  }
  EXPECT_EQ(now, baseline_threads_);
}

TEST_F(PdShutdownTest, APrefillNodeShuttingDownLosesNoRequest) {
  Node prefill = make_node("prefill");
  http::Server server({});
  prefill.pd->register_routes(server);
  ASSERT_TRUE(server.start().ok());
  Node decode = make_node("decode", {"http://127.0.0.1:" + std::to_string(server.port())});

  // The single-node answers, computed on the decode node's own engine.
  std::vector<std::vector<int32_t>> want;
  for (uint32_t i = 0; i < 6; ++i) {
    auto o = std::make_shared<Outcome>();
    auto done = o->done.get_future();
    auto id = decode.engine->submit(greedy(prompt(100 + i, 250)), [o](const engine::RequestOutput& out) {
      std::lock_guard<std::mutex> lock(o->mu);
      o->tokens.insert(o->tokens.end(), out.tokens.begin(), out.tokens.end());
      if (out.finish != engine::FinishReason::kNone) o->done.set_value();
    });
    ASSERT_TRUE(id.ok());
    ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    want.push_back(o->tokens);
  }

  std::vector<std::shared_ptr<Outcome>> outcomes;
  std::vector<std::future<void>> done;
  for (uint32_t i = 0; i < 6; ++i) {
    outcomes.push_back(std::make_shared<Outcome>());
    done.push_back(outcomes.back()->done.get_future());
    run(*decode.pd, greedy(prompt(100 + i, 250)), outcomes.back());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  prefill.engine->stop();  // its callers' prefills are cancelled mid-flight
  prefill.pd.reset();
  server.stop(1000);

  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_EQ(done[i].wait_for(std::chrono::seconds(120)), std::future_status::ready) << "request " << i;
    std::lock_guard<std::mutex> lock(outcomes[i]->mu);
    EXPECT_TRUE(outcomes[i]->start_status.ok()) << outcomes[i]->start_status.to_string();
    EXPECT_EQ(outcomes[i]->tokens, want[i]) << "request " << i;
  }
  const PdStats s = decode.pd->stats();
  EXPECT_EQ(s.remote + s.fallbacks, 6u);
  decode.engine->stop();
}

}  // namespace
}  // namespace tessera::serve
