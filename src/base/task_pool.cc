#include "base/task_pool.h"

#include "base/guarded.h"

namespace tessera {

TaskPool::TaskPool(std::string name, int threads, size_t max_queue) : name_(std::move(name)), max_queue_(max_queue) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool TaskPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void TaskPool::drop_queued() {
  std::lock_guard lock(mu_);
  queue_.clear();
}

size_t TaskPool::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

int TaskPool::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}

void TaskPool::loop() {
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
    run_guarded(name_, task);
    std::lock_guard lock(mu_);
    --busy_;
  }
}

}  // namespace tessera
