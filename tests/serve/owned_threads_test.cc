// OwnedThreads: join_all() waits for every running body, refuses new ones afterwards (the caller answers
// instead), finished threads are joined as new ones start, and an exception runs the error path.
#include "serve/owned_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tessera::serve {
namespace {

TEST(OwnedThreads, JoinAllWaitsForEveryBodyThenRefuses) {
  OwnedThreads threads;
  std::atomic<int> finished{0};
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(threads.start(
        "sleeper",
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          finished++;
        },
        nullptr));
  }
  threads.join_all();
  EXPECT_EQ(finished.load(), 6);  // none was left running (a detached thread would still be asleep)
  EXPECT_EQ(threads.size(), 0u);
  bool ran = false;
  EXPECT_FALSE(threads.start(
      "late", [&] { ran = true; }, nullptr));
  EXPECT_FALSE(ran);
}

TEST(OwnedThreads, FinishedThreadsAreJoinedAsNewOnesStart) {
  OwnedThreads threads;
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(threads.start(
        "quick", [&] { ran++; }, nullptr));
  for (int i = 0; i < 500 && ran.load() < 50; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(ran.load(), 50);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // their last step after the body: "done"
  ASSERT_TRUE(threads.start(
      "one more", [] {}, nullptr));
  EXPECT_LE(threads.size(), 2u);  // the 50 finished ones were joined, not kept
}

TEST(OwnedThreads, AnExceptionRunsTheErrorPathNotTerminate) {
  OwnedThreads threads;
  std::atomic<bool> answered{false};
  ASSERT_TRUE(threads.start(
      "thrower", [] { throw std::runtime_error("boom"); }, [&] { answered = true; }));
  threads.join_all();
  EXPECT_TRUE(answered.load());
}

}  // namespace
}  // namespace tessera::serve
