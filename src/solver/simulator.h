// A discrete-event simulator of one serving deployment: instances of prefill, decode or colocated ("both")
// role, a router, per-instance queues, continuous batching under a token budget with chunked prefill, KV
// transfer from prefill to decode instances over the link, and KV memory limits.
//
// The model of an instance (docs/solver.md, "Simulator"):
// - Every step runs the running decode sequences (one token each) plus prompt chunks filling the rest of
//   the token budget (prefill and both roles), FCFS. Its duration is the profile's roofline of the
//   step's aggregate work (profile.h).
// - Admission reserves KV for the whole request (prompt + output on decode/both; the prompt on prefill,
//   held until its transfer ends) and a batch slot, so nothing is ever preempted. A request that cannot
//   fit any instance is counted as unserved.
// - Prefill computes the first token. On a prefill instance the request then goes (router) to a decode
//   instance's queue; when admitted there, its prompt KV moves over the pair's link (one transfer at a time
//   per instance side) and it joins the decode batch at the next step boundary, which is when the client
//   gets the first token (Tessera's decode-first hand-off: the decode node answers the client): the
//   transfer is part of TTFT, not TPOT. On a colocated instance the first token is out when prefill ends.
// - A request overhead (the serving path outside the engines: HTTP hops, JSON) is added to TTFT: a constant,
//   or drawn from measured samples. A per-token serving cost (detokenising, streaming each token) lengthens
//   every step by that much per decoding sequence, since it runs on the same device between steps. A
//   per-stream start cost lengthens each request's first inter-token gap (it counts in TPOT and E2E).
//
// Pure and deterministic: the same inputs give bit-identical outputs (ties break by index).
// Thread-safety: simulate() has no shared state; call it from any thread.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "solver/model_cost.h"
#include "solver/profile.h"
#include "solver/spec.h"

namespace tessera::solver {

enum class Role { kIdle, kPrefill, kDecode, kBoth };
const char* role_name(Role r);
Result<Role> role_from_name(const std::string& name);

// How the router picks an instance. least-loaded: for a new request, the prefill-capable instance whose
// queued prompt tokens take least time at its prefill rate; for decode, the lowest slot occupancy.
// round-robin: in turn.
enum class RouterPolicy { kLeastLoaded, kRoundRobin };
Result<RouterPolicy> router_policy_from_name(const std::string& name);

struct SimInstance {
  std::string pool;
  Role role = Role::kBoth;
  int tp = 1;
  int max_batch = 64;
  LatencyModel latency;
  double interconnect_bandwidth = 0;
  double network_bandwidth = 0;   // per instance (all its devices), bytes/s
  double kv_capacity_tokens = 0;  // KV positions that fit beside the weights
  // When not empty: the decode part of each step is read off these measured points (interpolate_decode)
  // instead of the latency model, which still prices any prefill part of the step.
  std::vector<DecodePoint> decode_points;
  // When not empty: the prefill part of each step is read off these measured single-prompt points
  // (interpolate_prefill at the step's prompt tokens), the model pricing only how the step's chunks differ
  // from one fresh prompt of that many tokens (cached positions, several prompts).
  std::vector<PrefillPoint> prefill_points;
};

struct SimConfig {
  ModelCost cost;
  std::vector<SimInstance> instances;
  int token_budget = 2048;
  RouterPolicy router = RouterPolicy::kLeastLoaded;
  double request_overhead_s = 0;  // serving path outside the engines (HTTP hops, JSON), added to TTFT and E2E
  // When not empty: request i's overhead is drawn from these samples instead (a fixed low-discrepancy
  // sequence over their quantiles, so results stay deterministic and follow the measured spread).
  std::vector<double> request_overhead_samples_s;
  // When not empty: drawn instead for a request that arrives while its decoding instance is decoding.
  std::vector<double> request_overhead_busy_samples_s;
  double token_overhead_s = 0;         // added to a step per decoding sequence (serving work on the same device)
  double stream_start_overhead_s = 0;  // added once to each request's first inter-token gap (and E2E)
  double colocated_slowdown = 0;       // a step starting while another instance is mid-step runs this much longer
  long max_steps = 50000000;           // a simulation needing more steps fails (ResourceExhausted) instead of hanging
};

struct RequestOutcome {
  bool served = false;
  double ttft_s = 0;  // arrival -> first token
  double tpot_s = 0;  // mean time per output token after the first (0 for one-token outputs)
  double e2e_s = 0;   // arrival -> last token
  int prefill_instance = -1;
  int decode_instance = -1;
};

struct SimResult {
  std::vector<RequestOutcome> requests;  // in the order given
  double end_s = 0;                      // when the last request finished
  long steps = 0;                        // steps simulated over all instances
};

// Fails (InvalidArgument) on a configuration that cannot serve: no prefill-capable instance, prefill
// instances without decode instances, non-positive rates or capacities; ResourceExhausted when the run
// would take more than max_steps steps.
Result<SimResult> simulate(const SimConfig& config, const std::vector<Request>& requests);

struct LatencySummary {
  double p50 = 0, p90 = 0, p99 = 0, at_slo_percentile = 0;
};

struct SloReport {
  double attainment = 0;  // fraction of requests meeting both TTFT and TPOT targets
  double goodput = 0;     // requests/s meeting the SLO: attainment * offered rate
  double offered_rate = 0;
  int unserved = 0;
  LatencySummary ttft, tpot, e2e;
  bool meets_slo = false;  // attainment >= target and both percentiles within their targets
};

// offered_rate: requests/s the workload offers (its rate; for a trace, requests over the arrival span).
SloReport summarize(const SimResult& r, const Slo& slo, double offered_rate);
double offered_rate(const std::vector<Request>& requests);

}  // namespace tessera::solver
