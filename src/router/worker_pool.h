// WorkerPool: a fixed set of threads for the router's blocking upstream calls (http::fetch*). Each proxied
// request holds one worker while it streams, so `threads` bounds the requests the router has in flight
// upstream; at most `max_queue` more wait for a worker, and submit() refuses beyond that (the gateway then
// answers 503). A task that throws is logged and dropped (the thread lives on). Thread-safe; the destructor
// finishes queued work (unless drop_queued() was called) and joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::router {

class WorkerPool {
 public:
  WorkerPool(int threads, size_t max_queue);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False when the queue is full or the pool is stopping.
  bool submit(std::function<void()> task);
  // Forgets the tasks still waiting (the running ones finish); for a fast shutdown.
  void drop_queued();
  size_t queued() const;
  int busy() const;

 private:
  void loop();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  int busy_ = 0;                             // GUARDED_BY(mu_)
  size_t max_queue_;
  std::vector<std::thread> threads_;
};

}  // namespace tessera::router
