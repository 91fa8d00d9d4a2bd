// The solver's inputs as values: a fleet of device pools, a workload (the model served and its traffic)
// and a service-level objective. spec_yaml.h reads them from YAML files; docs/solver.md gives the schema.
//
// Thread-safety: values; generate_requests is pure (seeded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "solver/model_cost.h"
#include "solver/profile.h"

namespace tessera::solver {

// How to start one instance of a pool on this machine with `tessera serve` (solver/launch.h), for pools
// that exist here: the backend, its host threads, the CPUs instances are pinned to (in turn, `threads`
// each) and further serve flags. An empty backend: the pool cannot be launched locally.
struct LaunchSpec {
  std::string backend;
  int threads = 0;
  std::vector<int> cpus;
  std::vector<std::string> args;
};

struct Pool {
  std::string name;
  int count = 0;                    // devices
  double cost_per_hour = 0;         // per device
  DeviceProfile profile;            // from a profile file or a datasheet
  std::vector<int> instance_sizes;  // tensor-parallel sizes the search may use (empty: smallest that fits)
  std::vector<int> batch_limits;    // max running sequences per instance the search may use
  std::vector<std::string> roles;   // roles the search may give it (prefill, decode, both); empty: any
  LaunchSpec launch;                // optional
  bool decode_points = false;       // decode steps from the profile's measured points, not its fitted model
  bool prefill_points = false;      // prefill steps likewise
};

struct Fleet {
  std::vector<Pool> pools;
  double budget_per_hour = 0;  // 0: no budget cap
  int token_budget = 2048;     // tokens per step (chunked prefill chunk + decode tokens)
  std::string router = "least-loaded";
  double memory_utilization = 0.9;  // fraction of device memory for weights + KV
  double request_overhead_s = 0;    // serving path outside the engines per request (HTTP hops), in TTFT
  // Or its measured distribution: each request gets one of these (deterministically spread), not a constant.
  std::vector<double> request_overhead_samples_s;
  // Optional, with the samples: the overhead of a request that reaches its decoding instance while that
  // instance is decoding (its serving work then shares the device with the steps).
  std::vector<double> request_overhead_busy_samples_s;
  // Serving CPU time per streamed token on the instance that decodes it (detokenising, the SSE write),
  // taken from that instance's device: each step lasts this much longer per decoding sequence.
  double token_overhead_s = 0;
  // Per streamed request: the gap between its first and second token is this much longer than a step
  // (what a stream pays once for starting on the decode side), so it weighs on short answers' TPOT.
  double stream_start_overhead_s = 0;
  // For a fleet whose instances share one machine (a local cluster): a step that starts while another
  // instance is mid-step runs this fraction longer (the cores share caches and memory bandwidth, and each
  // node's serving threads take turns on the CPUs). 0: instances do not affect each other.
  double colocated_slowdown = 0;

  Status validate() const;
};

struct LengthDist {
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind = Kind::kFixed;
  double mean = 0;    // fixed value, or normal mean
  double stddev = 0;  // normal
  int min = 1;        // uniform range; clamp for normal
  int max = 1;
  Status validate(const char* what) const;
  double expected() const;
};

struct Request {
  double arrival_s = 0;
  int input_tokens = 0;
  int output_tokens = 0;  // including the first token, produced by prefill
};

struct ModelSpec {
  std::string name;
  model::ModelConfig config;
  double weight_bytes = 2;  // per parameter
  double kv_bytes = 2;      // per cached element
  std::string path;         // optional: the checkpoint (file or directory) a launched plan serves
  std::string tokenizer;    // optional: its tokenizer file, when `path` is a file
  ModelCost cost() const { return ModelCost::from_config(config, weight_bytes, kv_bytes); }
};

struct Workload {
  ModelSpec model;
  double rate = 0;                  // requests/s
  std::string arrival = "poisson";  // "poisson" or "uniform" (evenly spaced)
  LengthDist input;
  LengthDist output;
  int requests = 1000;
  uint64_t seed = 1;
  std::vector<Request> trace;  // when non-empty, replaces rate/arrival/lengths

  Status validate() const;
};

struct Slo {
  double ttft_s = 0;
  double tpot_s = 0;
  double percentile = 90;   // the targets hold at this percentile
  double attainment = 0.9;  // fraction of requests meeting both targets

  Status validate() const;
};

// The requests a workload describes, sorted by arrival; the same workload gives the same requests.
std::vector<Request> generate_requests(const Workload& w);

}  // namespace tessera::solver
