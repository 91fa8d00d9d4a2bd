// The measurements behind `tessera profile`: the engine's prefill and decode timed on one device, fitted into
// a device profile (a latency model, roofline or additive, with its fit error) for `tessera solve`.
//
// What it measures: prefill latency of one sequence versus prompt length (the engine prefills one sequence
// per call, so a batch of b prompts costs b calls and is not timed separately), and decode step latency
// versus batch size and context length, each the fastest (or the median) of `repeats` runs. Prefill runs
// have a pause as long as the run between them (a node is idle between prompts); decode steps of one point
// run back to back after an untimed one (a node decodes a stream's steps back to back), with a pause after
// the point. On a shared machine a run is only ever slowed by other processes, so the fastest is the cost of
// the work; the pauses keep this process from being scheduled as a CPU hog, which a serving node is not. KV
// bytes per token come from the engine's cache. The link rate is that of the same-host KV hand-off (export
// every layer to the wire layout, one copy for the shm link, import), unless the options give another
// link's figure (between hosts: `tessera link bench`).
//
// Runs on the calling thread; the device is used by nothing else meanwhile.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "model/loader.h"
#include "ops/backend.h"
#include "solver/profile.h"

namespace tessera::bench {

struct EngineProfileOptions {
  int max_tokens = 256;           // longest prompt / context timed (capped by the model's context)
  int max_batch = 16;             // largest decode batch timed
  int repeats = 3;                // runs per point
  std::string statistic = "min";  // kept of the runs per point: "min" (the fastest) or "median"
  bool prefill_export = false;    // time prefill exporting each layer's KV to the wire layout, as a prefill node
  DType kv_dtype = DType::kF16;   // the KV cache's type: what decode reads (`tessera serve`'s default)
  double network_gb_s = 0;        // > 0: the link rate as given, not measured
  // How the pauses between runs are taken (default: sleep); tests pass a no-op.
  std::function<void(double seconds)> pause;
};

// InvalidArgument for an unknown statistic or repeats < 1, max_tokens < 8, max_batch < 1 (named as the flags).
Status check_engine_profile_options(const EngineProfileOptions& options);

// Fills the measured parts of `profile`: source, model, kv_bytes_per_token, the prefill and decode points,
// network_bandwidth, the fitted latency model and its error. family, memory_bytes and
// interconnect_bandwidth are the caller's. Checks the options first (check_engine_profile_options).
Status measure_engine_profile(ops::Device& device, const model::LoadedModel& model, const EngineProfileOptions& options,
                              solver::DeviceProfile& profile);

}  // namespace tessera::bench
