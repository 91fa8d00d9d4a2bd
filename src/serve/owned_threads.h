// OwnedThreads: the threads a service starts per request (a prefill call, a completion, a remote prefill),
// owned by the service and joined when it shuts down, instead of detached threads that capture it and may
// outlive it. Finished threads are joined as new ones start, so the set stays as large as the work in flight.
//
// Thread-safety: every method may be called from any thread, including from a thread of the set (start() only:
// join_all() from one of its own threads would wait for itself).
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::serve {

class OwnedThreads {
 public:
  OwnedThreads() = default;
  OwnedThreads(const OwnedThreads&) = delete;
  OwnedThreads& operator=(const OwnedThreads&) = delete;
  ~OwnedThreads() { join_all(); }

  // Runs `body` on a new thread (through run_guarded under `name`: an exception is logged, then `on_exception`
  // runs). False, and nothing runs, once join_all() has begun: the caller answers for the work itself.
  bool start(std::string name, std::function<void()> body, std::function<void()> on_exception);
  // Refuses new threads and waits for every running one.
  void join_all();
  // Threads started and not yet joined.
  size_t size() const;

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  mutable std::mutex mu_;
  bool closed_ = false;        // GUARDED_BY(mu_)
  std::list<Worker> workers_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::serve
