// The shared state behind a TransferFuture, and the Operation an endpoint connection executes.
//
// An Operation is split into Chunks (at most `split_threshold` bytes each); the connection completes chunks
// in any order from any thread. The first error wins. When the last chunk completes the op's state is set
// (for write_with_imm the connection first sends the tag, see framed_connection.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "link/link.h"

namespace tessera::link::internal {

class OpState {
 public:
  bool ready() const;
  Status wait();
  bool wait_for_ms(int64_t ms);
  Status status() const;
  // Sets the final status; later calls are ignored (exactly once).
  void set(Status status);
  void request_cancel() { cancel_requested_.store(true, std::memory_order_relaxed); }
  bool cancel_requested() const { return cancel_requested_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::atomic<bool> cancel_requested_{false};
};

struct Region;

// One operation in flight on one connection.
struct Operation {
  OpKind kind = OpKind::kWrite;
  uint64_t tag = 0;  // write_with_imm
  std::shared_ptr<OpState> state = std::make_shared<OpState>();
  std::atomic<int64_t> remaining{0};  // chunks not yet completed
  std::mutex mu;
  Status first_error;     // guarded by mu
  bool imm_sent = false;  // guarded by mu

  void record(const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = s;
  }
  Status error() {
    std::lock_guard<std::mutex> lock(mu);
    return first_error;
  }
};

// A piece of an operation: one contiguous range on each side. `local` keeps the local region alive.
struct Chunk {
  std::shared_ptr<Operation> op;
  std::shared_ptr<Region> local;
  uint64_t local_offset = 0;
  RegionId remote{};
  uint64_t remote_offset = 0;
  uint64_t length = 0;
  bool is_imm = false;             // the tag message of a write_with_imm, sent after the data
  std::vector<std::byte> payload;  // send: the gathered message bytes
};

}  // namespace tessera::link::internal
