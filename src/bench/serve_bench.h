// The serving load generator behind `tessera bench serve`: replays a workload against an OpenAI-compatible
// server with streaming requests, at most max_concurrency in flight, each sent at its arrival time, and
// measures per request the time to first token, the gaps between tokens, TPOT and end-to-end latency.
// The summary uses the field names of vLLM's benchmark_serving results so existing tooling reads it.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/dataset.h"

namespace tessera::bench {

struct ServeBenchOptions {
  std::string url;    // http://host:port
  std::string model;  // "" : the first model the server lists
  WorkloadOptions workload;
  int max_concurrency = 0;     // 0: unlimited (one worker per request)
  double goodput_ttft_ms = 0;  // 0: no TTFT objective
  double goodput_tpot_ms = 0;  // 0: no TPOT objective
  bool progress = false;
  int timeout_s = 600;
  // A JSON object merged into every request body (e.g. a response_format, to measure structured output);
  // its fields override the generator's own. "" for none.
  std::string extra_body;
};

struct RequestResult {
  bool success = false;
  std::string error;
  int prompt_len = 0;
  int output_tokens = 0;
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;
  std::string text;
};

struct ServeBenchResult {
  std::vector<RequestResult> requests;
  double duration_s = 0;
  std::string model;
  std::string json;  // the report
};

Result<ServeBenchResult> run_serve_bench(const ServeBenchOptions& options);

}  // namespace tessera::bench
