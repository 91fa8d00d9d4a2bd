// TransferFuture: the handle an Agent operation returns. It becomes ready exactly once, with OK or the first
// error of the operation (peer lost, out of bounds, cancelled, shut down, checksum mismatch...).
//
// Thread-safety: a future may be waited on, polled and cancelled from any thread; copies share one state.
#pragma once

#include <chrono>
#include <memory>

#include "base/status.h"

namespace tessera::link {

namespace internal {
class OpState;
}

class TransferFuture {
 public:
  TransferFuture() = default;
  explicit TransferFuture(std::shared_ptr<internal::OpState> state) : state_(std::move(state)) {}
  // A future that is ready at once with `status` (used for requests rejected before they start).
  static TransferFuture ready_with(Status status);

  bool valid() const { return state_ != nullptr; }
  bool ready() const;
  // Blocks until ready; returns the operation's status.
  Status wait() const;
  // Waits at most `timeout`; returns whether the future is ready.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // The status once ready (call after ready()/wait_for() said so); DeadlineExceeded-free: never blocks.
  Status status() const;
  // Requests cancellation: pieces not yet handed to the wire are dropped; the future becomes ready with
  // Cancelled once the pieces already in flight have drained (bytes they carry may still land).
  void cancel() const;

 private:
  std::shared_ptr<internal::OpState> state_;
};

}  // namespace tessera::link
