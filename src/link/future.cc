#include "link/future.h"

#include "link/internal/op_state.h"

namespace tessera::link {

namespace internal {

bool OpState::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status OpState::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

bool OpState::wait_for_ms(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return done_; });
}

Status OpState::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return failed_precondition("transfer still in flight: wait for the future before reading its status");
  return status_;
}

void OpState::set(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

}  // namespace internal

TransferFuture TransferFuture::ready_with(Status status) {
  auto state = std::make_shared<internal::OpState>();
  state->set(std::move(status));
  return TransferFuture(std::move(state));
}

bool TransferFuture::ready() const { return state_ && state_->ready(); }

Status TransferFuture::wait() const {
  if (!state_) return failed_precondition("waiting on an empty TransferFuture");
  return state_->wait();
}

bool TransferFuture::wait_for(std::chrono::milliseconds timeout) const {
  return state_ && state_->wait_for_ms(timeout.count());
}

Status TransferFuture::status() const {
  if (!state_) return failed_precondition("status of an empty TransferFuture");
  return state_->status();
}

void TransferFuture::cancel() const {
  if (state_) state_->request_cancel();
}

}  // namespace tessera::link
