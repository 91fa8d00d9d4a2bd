// Benchmark workloads: what each request of a run asks for (prompt token ids, output length, arrival
// time). Deterministic for a seed. Prompts are token-id arrays (the completions API accepts them), so the
// input lengths are exact whatever the tokenizer.
//
//   fixed          every request input_len tokens in, output_len out
//   sharegpt-like  lengths drawn from log-normal distributions shaped like the ShareGPT conversations that
//                  vLLM's benchmarks use (heavy right tail), with the given means, clipped to the context
//   shared-prefix  num_prefixes groups; each request = its group's prefix_len-token prefix + a fresh suffix
//                  (input_len tokens in all), groups interleaved round-robin
//   trace:FILE     JSON lines {"timestamp": seconds, "input_len": n, "output_len": m}; arrivals from the trace
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::bench {

struct RequestSpec {
  std::vector<int32_t> prompt;
  int output_len = 0;
  double arrival_s = 0;  // offset from the start of the run
};

struct WorkloadOptions {
  std::string dataset = "fixed";
  int num_prompts = 100;
  int input_len = 128;
  int output_len = 128;
  int num_prefixes = 8;
  int prefix_len = 0;       // shared-prefix: 0 means input_len * 3 / 4
  double request_rate = 0;  // requests/s; 0 means all at once ("inf")
  double burstiness = 1.0;  // gamma shape: 1 is Poisson, < 1 burstier, > 1 more regular
  uint64_t seed = 0;
  int vocab_size = 0;   // token ids are drawn from [3, vocab_size)
  int max_context = 0;  // input + output is clipped to this
};

Result<std::vector<RequestSpec>> make_workload(const WorkloadOptions& options);

}  // namespace tessera::bench
