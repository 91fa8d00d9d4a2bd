// The graph path: a recorded list of operators, compiled once and replayed many times.
//
// The engine records one decode step (per batch-size bucket) as the ops::Op values it would have run
// eagerly, then compile() turns that list into a Graph:
//   1. elementwise folding: an AddOp that updates a tensor in place (out == a) immediately followed by an
//      RmsNormOp of that tensor becomes one AddRmsNormOp, and consecutive in-place AddOps into the same
//      tensor chain into the later one's normalisation when it has one. Only chains the operator set can
//      express are folded, so every backend runs the result;
//   2. a static buffer plan: every intermediate (a tensor in a buffer the caller lists as scratch) gets a
//      fixed offset in one arena, chosen from the intermediates' live ranges so that values whose lives do
//      not overlap share memory; the operators are rewritten to point into the arena.
// replay() runs the compiled list on a stream. Inputs (ids, positions, slots, tables) and persistent
// state (weights, KV cache) are outside the plan: the caller uploads inputs into their buffers before
// each replay, and reads outputs through Graph::remap().
//
// A Graph is owned by one thread (like the Stream it runs on).
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace tessera::ops {

struct GraphStats {
  int recorded_ops = 0;
  int compiled_ops = 0;
  int folded = 0;            // operator pairs folded into one
  size_t scratch_bytes = 0;  // the intermediates' buffers, as recorded
  size_t arena_bytes = 0;    // the same values under the static plan
};

class Graph {
 public:
  const std::vector<Op>& ops() const { return ops_; }
  const GraphStats& stats() const { return stats_; }
  // The tensor `t` as the compiled graph places it (unchanged when it is not an intermediate).
  Tensor remap(const Tensor& t) const;
  Status replay(Stream& stream) const;

 private:
  friend Result<std::unique_ptr<Graph>> compile(const std::vector<Op>&, const std::vector<Buffer*>&, Device&);
  std::vector<Op> ops_;
  std::vector<std::pair<Buffer*, size_t>> placement_;  // scratch buffer -> arena offset
  std::unique_ptr<Buffer> arena_;
  GraphStats stats_;
};

// Folds elementwise chains (see above) in a recorded list; returns how many folds it made.
int fold_elementwise(std::vector<Op>& ops);

// Compiles `recorded`; `scratch` lists the buffers holding intermediates, which the plan may move.
Result<std::unique_ptr<Graph>> compile(const std::vector<Op>& recorded, const std::vector<Buffer*>& scratch,
                                       Device& device);

}  // namespace tessera::ops
