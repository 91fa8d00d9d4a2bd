// TaskPool: a fixed set of threads for work that must not run on an io thread: the router's blocking upstream
// calls (http::fetch*; each proxied request holds one worker while it streams, so `threads` bounds the requests
// in flight upstream) and a node's chat-template renders (a model's template is untrusted input and may run up
// to its step budget). At most `max_queue` more tasks wait for a worker, and submit() refuses beyond that (the
// caller then answers 503). A task that throws is logged under the pool's name and dropped (the thread lives
// on). Not to be confused with ops/cpu's WorkerPool (a kernel's parallel-for threads).
//
// Thread-safe; the destructor finishes queued work (unless drop_queued() was called) and joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera {

class TaskPool {
 public:
  TaskPool(std::string name, int threads, size_t max_queue);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

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
  std::string name_;
  size_t max_queue_;
  std::vector<std::thread> threads_;
};

}  // namespace tessera
