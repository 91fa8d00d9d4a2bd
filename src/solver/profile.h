// Device profiles: what one device family can do, as data the simulator reads.
//
// A profile holds the family's memory, its links (network: between instances, used for the prefill ->
// decode KV transfer; interconnect: inside a tensor-parallel instance) and a latency model of one serving
// step, of one of two shapes:
//
//   roofline: step_seconds = overhead + max(flops / flops_per_s, bytes / bytes_per_s)
//   additive: step_seconds = overhead + matmul flops / flops_per_s + attention flops / attention_flops_per_s
//                            + bytes / bytes_per_s
//
// plus the tensor-parallel all-reduce time. Datasheets give rooflines; a fit tries both shapes and keeps the
// one that fits clearly better (scalar backends that neither overlap memory with compute nor run attention at
// matmul speed are additive).
//
// A profile comes either from a datasheet (peak FLOP/s and memory bandwidth times stated efficiencies) or
// from measurements (`tessera profile`, issue 9 item 1): prefill latency versus prompt tokens and batch,
// decode step latency versus batch and context. Measured points are kept in the profile next to the model
// fitted to them and its fit error, so a reader can judge the fit.
//
// Thread-safety: values; the functions are pure.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/model_cost.h"

namespace tessera::solver {

enum class LatencyKind { kRoofline, kAdditive };

struct LatencyModel {
  double overhead_s = 0;   // fixed cost per step (launches, scheduling, sampling)
  double flops_per_s = 0;  // effective compute rate (additive: of the matmul FLOPs)
  double bytes_per_s = 0;  // effective memory bandwidth
  LatencyKind kind = LatencyKind::kRoofline;
  double attention_flops_per_s = 0;  // additive only
};

struct FitError {
  int points = 0;
  double mean_abs_rel = 0;  // mean of |predicted - measured| / measured
  double max_abs_rel = 0;
};

// `batch` prompts of `tokens` tokens each, prefilled in one step.
struct PrefillPoint {
  int tokens = 0;
  int batch = 0;
  double seconds = 0;
};
// One decode step of `batch` sequences, each holding `context` positions.
struct DecodePoint {
  int batch = 0;
  int context = 0;
  double seconds = 0;
};

// The datasheet figures of one device (SI units: FLOP/s, bytes/s, bytes) and the efficiencies assumed
// to turn peaks into sustained rates.
struct Datasheet {
  double peak_flops = 0;
  double memory_bandwidth = 0;
  double memory_bytes = 0;
  double interconnect_bandwidth = 0;  // inside an instance (NVLink, HCCS, MetaXLink ...)
  double network_bandwidth = 0;       // between instances (KV transfer)
  double flops_efficiency = 0.6;
  double bandwidth_efficiency = 0.8;
  double step_overhead_s = 0.002;
};

struct DeviceProfile {
  std::string family;
  std::string source;  // "datasheet" or "measured"
  std::string model;   // measured profiles: the model the points were taken with
  double memory_bytes = 0;
  double network_bandwidth = 0;
  double interconnect_bandwidth = 0;
  double kv_bytes_per_token = 0;  // measured profiles: as recorded; informational
  LatencyModel latency;
  FitError fit;
  std::vector<PrefillPoint> prefill;
  std::vector<DecodePoint> decode;

  Status validate() const;
};

// The work of one step, aggregated over the sequences in it.
struct StepShape {
  double decode_seqs = 0;         // sequences producing one token each
  double decode_context_sum = 0;  // sum of their context lengths (positions attended)
  double prefill_tokens = 0;      // prompt tokens processed (all chunks)
  double prefill_positions = 0;   // sum over chunks of chunk * past + chunk * (chunk + 1) / 2
  double prefill_past = 0;        // sum over chunks of cached positions read
  // The same two sums for sliding layers (each token sees its window at most): add_prefill_chunk fills all four.
  double prefill_window_positions = 0;
  double prefill_window_past = 0;
  double prefill_seqs = 0;  // sequences with a chunk in the step (each reads and writes its recurrent state)
  double sampled = 0;       // tokens whose logits are computed
};

struct StepWork {
  double flops = 0;            // all of them, attention included
  double attention_flops = 0;  // the attention part of `flops`
  double bytes = 0;
  double tokens = 0;  // tokens through the body (for tensor-parallel all-reduce traffic)
};

// A decode step's sliding layers see min(mean context, window) positions per sequence: exact when every sequence of
// the step is on the same side of the window.
StepWork step_work(const ModelCost& cost, const StepShape& shape);
// Adds one sequence's chunk of `chunk` prompt tokens after `past` cached positions (not sampled).
void add_prefill_chunk(StepShape& shape, const ModelCost& cost, double past, double chunk);
// `batch` fresh prompts of `tokens` each, the last token of each sampled.
StepShape prefill_shape(const ModelCost& cost, double tokens, double batch);
StepShape decode_shape(double batch, double context);

// Seconds for one step on an instance of `tp` devices of this model (flops and bandwidth scale with tp;
// each layer adds two ring all-reduces of the activations over the interconnect when tp > 1).
double step_seconds(const LatencyModel& m, const StepWork& w, int tp, double interconnect_bandwidth,
                    const ModelCost& cost);

// A decode step's seconds read off measured points instead of a fitted model: piecewise linear in batch at
// each measured context, then linear in context between the two nearest contexts; beyond the measured range
// the end segments extend (never below zero). Fails (InvalidArgument) without points.
Result<double> interpolate_decode(const std::vector<DecodePoint>& points, double batch, double context);
// A prefill step of one prompt of `tokens` tokens read off the measured single-prompt points (batch 1),
// piecewise linear in tokens, the end segments extended (never below zero). Fails (InvalidArgument) without
// such points.
Result<double> interpolate_prefill(const std::vector<PrefillPoint>& points, double tokens);

DeviceProfile profile_from_datasheet(const std::string& family, const Datasheet& d);
Status validate_datasheet(const Datasheet& d);

// Fits a latency model to measured points, minimising squared relative error: the roofline by a
// deterministic coarse-to-fine search in log space (overhead in closed form), the additive model exactly
// (non-negative least squares over its four inverse rates); keeps the roofline unless the additive shape's
// mean error is under 90% of the roofline's (it has one parameter more).
Result<std::pair<LatencyModel, FitError>> fit_latency_model(const ModelCost& cost,
                                                            const std::vector<PrefillPoint>& prefill,
                                                            const std::vector<DecodePoint>& decode);

}  // namespace tessera::solver
