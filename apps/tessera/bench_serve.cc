// `tessera bench serve`: the serving load generator (see src/bench/serve_bench.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/core.h>

#include "bench/serve_bench.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct BenchServeArgs {
  bench::ServeBenchOptions o;
  std::string rate = "inf";
  std::string goodput;
  std::string out;
};

int run_bench_serve(BenchServeArgs a) {
  if (a.rate != "inf") {
    try {
      a.o.workload.request_rate = std::stod(a.rate);
    } catch (...) {
      return fail(fmt::format("--request-rate must be a number or 'inf', got '{}'", a.rate));
    }
    if (!(a.o.workload.request_rate > 0)) return fail("--request-rate must be positive");
  }
  // --goodput ttft:MS,tpot:MS
  for (size_t pos = 0; pos < a.goodput.size();) {
    size_t comma = a.goodput.find(',', pos);
    std::string item = a.goodput.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    double v = 0;
    try {
      v = colon == std::string::npos ? -1 : std::stod(item.substr(colon + 1));
    } catch (...) {
      v = -1;
    }
    std::string key = item.substr(0, colon);
    if (v <= 0 || (key != "ttft" && key != "tpot"))
      return fail(fmt::format("bad --goodput item '{}': expected ttft:MS or tpot:MS", item));
    (key == "ttft" ? a.o.goodput_ttft_ms : a.o.goodput_tpot_ms) = v;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
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
  cmd->add_option("--url", a->o.url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--model", a->o.model, "Model id (default: the first the server lists)");
  cmd->add_option("--dataset", a->o.workload.dataset, "fixed | sharegpt-like | shared-prefix | trace:FILE")
      ->capture_default_str();
  cmd->add_option("--input-len", a->o.workload.input_len, "Prompt tokens (mean for sharegpt-like)")
      ->capture_default_str();
  cmd->add_option("--output-len", a->o.workload.output_len, "Output tokens (mean for sharegpt-like)")
      ->capture_default_str();
  cmd->add_option("--num-prefixes", a->o.workload.num_prefixes, "shared-prefix: number of distinct prefixes")
      ->capture_default_str();
  cmd->add_option("--prefix-len", a->o.workload.prefix_len,
                  "shared-prefix: prefix tokens (default 3/4 of --input-len)");
  cmd->add_option("--num-prompts", a->o.workload.num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--request-rate", a->rate, "Requests per second, or inf (all at once)")->capture_default_str();
  cmd->add_option("--burstiness", a->o.workload.burstiness, "Gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", a->o.max_concurrency, "Requests in flight at most (0: unlimited)");
  cmd->add_option("--goodput", a->goodput, "SLOs for goodput, e.g. ttft:500,tpot:50");
  cmd->add_option("--seed", a->o.workload.seed, "Workload seed")->capture_default_str();
  cmd->add_option("--vocab-size", a->o.workload.vocab_size,
                  "Token ids are drawn below this (default: from /v1/models)");
  cmd->add_option("--timeout", a->o.timeout_s, "Per-request timeout in seconds")->capture_default_str();
  cmd->add_option("--out", a->out, "Write the result JSON (vLLM benchmark_serving field names) here");
  return [a] { return run_bench_serve(*a); };
}

}  // namespace tessera::cli
