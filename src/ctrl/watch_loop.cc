#include "ctrl/watch_loop.h"

#include <chrono>

#include "base/guarded.h"

namespace tessera::ctrl {

WatchLoop::WatchLoop(int64_t start_revision, PollFn poll, WatchCallback callback)
    : since_(start_revision), poll_(std::move(poll)), callback_(std::move(callback)) {
  thread_ = std::thread([this] { run(); });
}

WatchLoop::~WatchLoop() {
  stop_.store(true);
  thread_.join();
}

void WatchLoop::run() {
  // A throwing poller or callback (a bug, or a store answer validation missed) must not end the process,
  // nor the watch: the callback hears an error (and re-reads), and polling resumes.
  while (!stop_.load()) {
    run_guarded(
        "ctrl watch", [this] { run_polls(); },
        [this] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          callback_({}, Status(StatusCode::kOutOfRange, "watch failed unexpectedly; re-read"));
        });
  }
}

void WatchLoop::run_polls() {
  bool failing = false;
  while (!stop_.load()) {
    int64_t resume = since_;
    auto r = poll_(since_, &resume);
    if (stop_.load()) return;
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kOutOfRange) {
        since_ = resume;  // history lost or store restarted: the callback re-reads
        callback_({}, r.status());
        continue;
      }
      if (r.status().code() == StatusCode::kDeadlineExceeded) continue;  // an idle long poll
      if (!failing) callback_({}, r.status());
      failing = true;
      for (int i = 0; i < 10 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (failing) {
      failing = false;
      // The store came back; events may have been missed while it was away.
      callback_({}, Status(StatusCode::kOutOfRange, "watch reconnected; re-read"));
    }
    since_ = std::max(since_, r->revision);
    if (!r->events.empty()) callback_(r->events, ok_status());
  }
}

}  // namespace tessera::ctrl
