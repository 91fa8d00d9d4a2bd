#include "serve/owned_threads.h"

#include <vector>

#include "base/guarded.h"

namespace tessera::serve {

bool OwnedThreads::start(std::string name, std::function<void()> body, std::function<void()> on_exception) {
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        finished.push_back(std::move(it->thread));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back(
        {std::thread([name = std::move(name), body = std::move(body), on_exception = std::move(on_exception), done] {
           run_guarded(name, body, [&] {
             if (on_exception) on_exception();
           });
           *done = true;
         }),
         done});
  }
  for (std::thread& t : finished) t.join();  // they are done: this returns at once
  return true;
}

void OwnedThreads::join_all() {
  std::list<Worker> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    all.swap(workers_);
  }
  for (Worker& w : all) {
    if (w.thread.joinable()) w.thread.join();
  }
}

size_t OwnedThreads::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

}  // namespace tessera::serve
