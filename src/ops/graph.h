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
// replay() runs the compiled list on a stream. On a device whose DeviceInfo::supports_graphs is true the
// first replay records the list on that stream (Stream::record: a CUDA graph, an OpenCL command buffer,
// ...) and every replay launches that recording; elsewhere replay() submits the ops one by one. Inputs
// (ids, positions, slots, tables) and persistent state (weights, KV cache) are outside the plan: the
// caller uploads inputs into their buffers before each replay, and reads outputs through Graph::remap().
// Per-step shapes therefore never reach the recording: a step's positions and lengths are buffer contents.
//
// A Graph is owned by one thread (like the Stream it runs on); a recorded Graph must not outlive the stream
// it was first replayed on.
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
  Status replay(Stream& stream);
  // "eager" until a replay recorded the list natively, then the Recording's kind().
  std::string_view replayed_as() const { return recording_ ? recording_->kind() : "eager"; }

 private:
  friend Result<std::unique_ptr<Graph>> compile(const std::vector<Op>&, const std::vector<Buffer*>&, Device&);
  std::vector<Op> ops_;
  std::vector<std::pair<Buffer*, size_t>> placement_;  // scratch buffer -> arena offset
  std::unique_ptr<Buffer> arena_;
  GraphStats stats_;
  bool native_ = false;                   // the device records (DeviceInfo::supports_graphs)
  std::unique_ptr<Recording> recording_;  // made by the first replay when native_
  const Stream* recorded_on_ = nullptr;
};

// Folds elementwise chains (see above) in a recorded list; returns how many folds it made.
int fold_elementwise(std::vector<Op>& ops);

// Compiles `recorded`; `scratch` lists the buffers holding intermediates, which the plan may move.
Result<std::unique_ptr<Graph>> compile(const std::vector<Op>& recorded, const std::vector<Buffer*>& scratch,
                                       Device& device);

}  // namespace tessera::ops
