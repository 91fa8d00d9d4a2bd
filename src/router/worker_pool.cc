#include "router/worker_pool.h"

#include "base/guarded.h"

namespace tessera::router {

WorkerPool::WorkerPool(int threads, size_t max_queue) : max_queue_(max_queue) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkerPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::drop_queued() {
  std::lock_guard lock(mu_);
  queue_.clear();
}

size_t WorkerPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

int WorkerPool::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}

void WorkerPool::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    run_guarded("router worker", task);
    std::lock_guard lock(mu_);
    --busy_;
  }
}

}  // namespace tessera::router
