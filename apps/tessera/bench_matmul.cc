// `tessera bench matmul`: one matrix product timed on one backend (ops/matmul_timing.h): the kernel alone, for
// prefill shapes, the batch size where a kernel changes, and one cpu kernel variant against another
// (`tessera --cpu-isa amx|avx512|... bench matmul ...`).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "base/dtype.h"
#include "commands.h"
#include "ops/matmul_timing.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct MatMulArgs {
  std::string backend = "cpu", dtype = "q4_0";
  int threads = 1, repeat = 20;
  int64_t rows = 512, k = 768, m = 2048;
};

int run_matmul_bench(const MatMulArgs& a) {
  const std::optional<DType> dtype = parse_dtype(a.dtype);
  if (!dtype || *dtype == DType::kI32) return fail("--dtype: '" + a.dtype + "' is not a weight type");
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  const ops::MatMulShape shape{*dtype, a.rows, a.k, a.m};
  auto t = ops::time_matmul(**device, shape, a.repeat);
  if (!t.ok()) return fail(t.status().message());
  std::printf(
      "%s, %s weights [%lld x %lld], %lld rows, %d threads: best %.3f ms, median %.3f ms, %.1f G "
      "multiply-adds/s (best)\n",
      (*device)->info().name.c_str(), a.dtype.c_str(), static_cast<long long>(a.m), static_cast<long long>(a.k),
      static_cast<long long>(a.rows), a.threads, t->best() * 1e3, t->median() * 1e3, t->best_macs_per_s(shape) / 1e9);
  return 0;
}

}  // namespace

Action add_bench_matmul_subcommand(CLI::App& bench) {
  auto args = std::make_shared<MatMulArgs>();
  CLI::App* cmd = bench.add_subcommand("matmul", "One matrix product timed on one backend (the kernel alone)");
  cmd->add_option("--backend", args->backend, "Operator backend")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Weight type (f32, f16, bf16, q8_0, q4_0, ..., q6_k)")->capture_default_str();
  cmd->add_option("--rows", args->rows, "Activation rows (the batch, or a prefill chunk)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--k", args->k, "Inner size (weight columns)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--m", args->m, "Weight rows (outputs per activation row)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed runs (after one warm-up)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  return [args] { return run_matmul_bench(*args); };
}

}  // namespace tessera::cli
