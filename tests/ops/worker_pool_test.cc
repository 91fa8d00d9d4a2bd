// The cpu backend's WorkerPool: every index of every job runs exactly once, whichever threads are awake (equal
// chunks or tapered ones, whose sizes shrink to a floor);
// jobs that follow each other at once (the operators of one step) and after the workers fell asleep (the
// gap between steps) both complete; a thread that stalls inside a chunk delays only its chunk.
#include "ops/cpu/worker_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tessera::ops::cpu {
namespace {

TEST(WorkerPool, EveryIndexRunsExactlyOnceAcrossManyJobs) {
  for (int threads : {1, 2, 3, 8}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        parallel_for(&pool, n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n;
      }
    }
  }
}

TEST(WorkerPool, TaperedChunksRunEveryIndexOnceAndShrinkToAFloor) {
  for (int threads : {1, 2, 3, 8}) {
    WorkerPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 128, 1000, 4097, 1 << 20}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for_tapered(&pool, n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << threads << " " << n;

      int64_t bounds[kTaperedChunks + 1];
      const int chunks = tapered_bounds(n, threads, bounds);
      ASSERT_GE(chunks, 1);
      ASSERT_LE(chunks, kTaperedChunks);
      EXPECT_EQ(bounds[0], 0);
      EXPECT_EQ(bounds[chunks], n);
      // The first chunk is 1 / (2 * threads) of the job (or the floor, a 48th); sizes never grow, and the last is
      // at most the floor.
      const int64_t floor = std::max<int64_t>(1, n / kTaperedFloor);
      EXPECT_EQ(bounds[1], std::min(n, std::max(floor, n / (2 * threads)))) << threads << " " << n;
      for (int c = 1; c < chunks; ++c) {
        ASSERT_GT(bounds[c + 1], bounds[c]);
        ASSERT_LE(bounds[c + 1] - bounds[c], bounds[c] - bounds[c - 1]) << threads << " " << n << " " << c;
      }
      EXPECT_LE(bounds[chunks] - bounds[chunks - 1], floor) << threads << " " << n;
    }
  }
  int64_t none[1];
  EXPECT_EQ(tapered_bounds(0, 2, none), 0);
  EXPECT_EQ(none[0], 0);
}

TEST(WorkerPool, JobsAfterTheWorkersFellAsleepStillComplete) {
  WorkerPool pool(3);
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long past the spin: workers sleep
    std::atomic<int64_t> sum{0};
    parallel_for(&pool, 256, [&](int64_t i) {
      sum.fetch_add(i);
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // long enough for workers to join in
    });
    EXPECT_EQ(sum.load(), 255 * 256 / 2);
  }
  EXPECT_GE(pool.jobs(), 5u);
}

TEST(WorkerPool, AStalledChunkDelaysOnlyItselfNotTheRest) {
  WorkerPool pool(2);
  // One index sleeps 200 ms; the other chunks are done by the other participant meanwhile, and the job ends
  // when the slow chunk does: about 200 ms, not 200 ms times the chunks a static split would give that thread.
  std::atomic<int> done{0};
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(&pool, 8, [&](int64_t i) {
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (i != 0) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    done.fetch_add(1);
  });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(done.load(), 8);
  // Static halves would be 200 + 3 * 40 = 320 ms on one side; claiming leaves the sleeper's partner the other
  // seven chunks (280 ms) at worst. The bound only catches a serial run (480 ms).
  EXPECT_LT(ms, 470.0);
}

TEST(WorkerPool, SmallWorkRunsInlineOnTheCaller) {
  WorkerPool pool(4);
  const auto me = std::this_thread::get_id();
  bool all_here = true;
  parallel_for(
      &pool, 100, [&](int64_t) { all_here = all_here && std::this_thread::get_id() == me; }, 1.0, 1000.0);
  EXPECT_TRUE(all_here);
  EXPECT_EQ(pool.jobs(), 0u);
  parallel_for(nullptr, 3, [&](int64_t) { all_here = all_here && std::this_thread::get_id() == me; });
  EXPECT_TRUE(all_here);
}

}  // namespace
}  // namespace tessera::ops::cpu
