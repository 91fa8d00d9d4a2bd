#include "engine/chunk_pool.h"

namespace tessera::engine {

void ChunkPool::add(int start, int count, std::span<const float> pooled) {
  if (start == 0 || acc_.size() != pooled.size()) {
    rows_ = 0;
    acc_.assign(pooled.size(), 0.0);
  }
  if (kind_ == ops::PoolKind::kMean) {
    for (size_t i = 0; i < pooled.size(); ++i) acc_[i] += static_cast<double>(pooled[i]) * count;
  } else if (kind_ == ops::PoolKind::kLast || start == 0) {
    for (size_t i = 0; i < pooled.size(); ++i) acc_[i] = pooled[i];
  }
  rows_ = start + count;
}

std::vector<float> ChunkPool::result() const {
  std::vector<float> out(acc_.size());
  const double scale = kind_ == ops::PoolKind::kMean && rows_ > 0 ? 1.0 / rows_ : 1.0;
  for (size_t i = 0; i < acc_.size(); ++i) out[i] = static_cast<float>(acc_[i] * scale);
  return out;
}

}  // namespace tessera::engine
