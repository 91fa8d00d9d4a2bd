// WatchLoop: the thread behind a client-side Watch. Calls `poll(since)` repeatedly (each call waits up to
// about a second for changes), hands events to the callback, and on errors reports them, backs off and
// retries, so a watch survives the store restarting.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "ctrl/store.h"

namespace tessera::ctrl {

struct PollResult {
  std::vector<WatchEvent> events;
  int64_t revision = 0;  // resume after this revision
};

// Returns events after `since`, or an error; OutOfRange carries no events and asks the loop to resume from
// `resume` (set by the poller from the store's current revision).
using PollFn = std::function<Result<PollResult>(int64_t since, int64_t* resume)>;

class WatchLoop final : public Watch {
 public:
  WatchLoop(int64_t start_revision, PollFn poll, WatchCallback callback);
  ~WatchLoop() override;

 private:
  void run();  // the thread: run_polls() under run_guarded, restarted after an exception
  void run_polls();
  int64_t since_;
  PollFn poll_;
  WatchCallback callback_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::ctrl
