// StagingAllocator: first-fit byte ranges inside a decode node's staging region (the link memory that prefill
// nodes write KV into), 64-byte aligned. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace tessera::kv {

class StagingAllocator {
 public:
  explicit StagingAllocator(uint64_t size) { free_[0] = size; }
  // The offset of `n` free bytes, or nullopt when no free range is that long.
  std::optional<uint64_t> allocate(uint64_t n);
  // Gives back the range that starts at `at` (an offset allocate() returned; others are ignored).
  void release(uint64_t at);

 private:
  std::mutex mu_;
  std::map<uint64_t, uint64_t> free_, used_;  // GUARDED_BY(mu_): offset -> length
};

}  // namespace tessera::kv
