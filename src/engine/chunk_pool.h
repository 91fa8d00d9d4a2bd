// ChunkPool: an embedding's pooled vector from the pooled vectors of its prompt's chunks. A causal model's prompt
// may be computed in several steps (chunked prefill); each step pools its own rows (ops::PoolOp), and this puts
// the pieces together: kMean weights each chunk's mean by its row count, kFirst keeps the chunk that starts at
// position 0, kLast the latest chunk. A chunk starting at position 0 starts over (a preempted prompt is
// computed again from the beginning). Plain data; one request's, on the engine thread.
#pragma once

#include <span>
#include <vector>

#include "ops/ops.h"

namespace tessera::engine {

class ChunkPool {
 public:
  explicit ChunkPool(ops::PoolKind kind = ops::PoolKind::kLast) : kind_(kind) {}

  // The pooled vector of the `count` rows from position `start`.
  void add(int start, int count, std::span<const float> pooled);
  int rows() const { return rows_; }
  std::vector<float> result() const;

 private:
  ops::PoolKind kind_;
  int rows_ = 0;
  std::vector<double> acc_;
};

}  // namespace tessera::engine
