// `tessera bench serve`: the serving load generator (see src/bench/serve_bench.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/core.h>

#include "bench/serve_bench.h"
#include "bench_serve_flags.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct BenchServeArgs : BenchServeFlags {
  std::string out;
};

int run_bench_serve(BenchServeArgs a) {
  if (Status s = finish_bench_serve_flags(a); !s.ok()) return fail(s.message());
  a.o.progress = true;
  auto r = bench::run_serve_bench(a.o);
  if (!r.ok()) return fail(r.status().message());
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << r->json << "\n";
    if (!f) return fail(fmt::format("cannot write {}", a.out));
  }
  int ok = 0;
  int64_t out_tokens = 0;
  std::vector<double> ttft;
  for (const auto& q : r->requests) {
    ok += q.success;
    out_tokens += q.success ? q.output_tokens : 0;
  }
  std::printf("%d/%zu requests in %.2f s: %.2f req/s, %.1f output tok/s\n", ok, r->requests.size(), r->duration_s,
              ok / r->duration_s, out_tokens / r->duration_s);
  for (const auto& q : r->requests) {
    if (!q.success) {
      std::printf("first error: %s\n", q.error.c_str());
      break;
    }
  }
  return ok == static_cast<int>(r->requests.size()) ? 0 : 1;
}

}  // namespace

Action add_bench_serve_subcommand(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Load-test an OpenAI-compatible server with streaming requests");
  add_bench_serve_flags(*cmd, *a, /*with_rate=*/true);
  cmd->add_option("--out", a->out, "Write the result JSON (vLLM benchmark_serving field names) here");
  return [a] { return run_bench_serve(*a); };
}

}  // namespace tessera::cli
