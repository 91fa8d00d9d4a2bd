// The workload and client flags shared by `tessera bench serve` and `tessera bench sweep`.
#pragma once

#include <string>

#include "base/status.h"
#include "bench/serve_bench.h"

namespace CLI {
class App;
}

namespace tessera::cli {

struct BenchServeFlags {
  bench::ServeBenchOptions o;
  std::string rate = "inf";
  std::string goodput;
};

// Adds --url --model --dataset --input-len ... --timeout to `cmd`; `with_rate` adds --request-rate (a sweep
// over rates sets it per point instead).
void add_bench_serve_flags(CLI::App& cmd, BenchServeFlags& f, bool with_rate);

// Parses --request-rate and --goodput into `f.o`.
Status finish_bench_serve_flags(BenchServeFlags& f);

}  // namespace tessera::cli
