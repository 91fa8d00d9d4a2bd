#include "kv/pd_link/staging.h"

namespace tessera::kv {

std::optional<uint64_t> StagingAllocator::allocate(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  n = (n + 63) & ~uint64_t{63};
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const uint64_t at = it->first, len = it->second;
    free_.erase(it);
    if (len > n) free_[at + n] = len - n;
    used_[at] = n;
    return at;
  }
  return std::nullopt;
}

void StagingAllocator::release(uint64_t at) {
  std::lock_guard<std::mutex> lock(mu_);
  auto u = used_.find(at);
  if (u == used_.end()) return;
  uint64_t len = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + len) {
    len += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(at);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == at) {
      prev->second += len;
      return;
    }
  }
  free_[at] = len;
}

}  // namespace tessera::kv
