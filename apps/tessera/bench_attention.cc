// `tessera bench attention`: decode or prefill attention timed alone on one backend (ops/attention_timing.h): how
// fast a decode kernel reads the KV cache at a context length, without the weights' traffic around it, how many
// multiply-adds a second a prefill chunk's kernel does (`--queries`), and one cpu kernel variant against another
// (`tessera --cpu-isa avx512|avx2|... bench attention ...`).
#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "base/dtype.h"
#include "commands.h"
#include "ops/attention_timing.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct AttentionArgs {
  std::string backend = "cpu", kv_dtype = "f16";
  int threads = 1, repeat = 10, context = 4096, queries = 1;
  bool resident = false;
  int64_t batch = 1, heads = 32, kv_heads = 8, head_dim = 128;
};

int run_attention_bench(const AttentionArgs& a) {
  const std::optional<DType> dtype = parse_dtype(a.kv_dtype);
  if (!dtype) return fail("--kv-dtype: '" + a.kv_dtype + "' is not a type");
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  const ops::AttentionShape shape{*dtype, a.batch, a.heads, a.kv_heads, a.head_dim, a.context, a.queries};
  auto t = ops::time_attention(**device, shape, a.repeat, a.resident);
  if (!t.ok()) return fail(t.status().message());
  const std::string head =
      fmt::format("{}, {} cache, {} x {} positions, {} heads on {} kv heads of {}, {} threads ({} {})",
                  (*device)->info().name, a.kv_dtype, a.batch, a.context, a.heads, a.kv_heads, a.head_dim, a.threads,
                  t->copies, a.resident ? "cache, resident" : "caches in turn");
  if (a.queries == 1) {
    std::printf("%s: best %.3f ms, median %.3f ms, %.1f GB/s of cache read (median)\n", head.c_str(), t->best() * 1e3,
                t->median() * 1e3, ops::AttentionTiming::cache_bytes(shape) / t->median() / 1e9);
  } else {
    std::printf("%s, prefill of the last %d: best %.3f ms, median %.3f ms, %.1f G multiply-adds/s (median)\n",
                head.c_str(), a.queries, t->best() * 1e3, t->median() * 1e3,
                ops::AttentionTiming::multiply_adds(shape) / t->median() / 1e9);
  }
  return 0;
}

}  // namespace

Action add_bench_attention_subcommand(CLI::App& bench) {
  auto args = std::make_shared<AttentionArgs>();
  CLI::App* cmd =
      bench.add_subcommand("attention", "Decode or prefill attention timed on one backend (the operator alone)");
  cmd->add_option("--backend", args->backend, "Operator backend")->capture_default_str();
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache element type (f32, f16, bf16, q8_0, q4_0)")
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Sequences, one query each")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--context", args->context, "Positions each sequence sees")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--queries", args->queries,
                  "New tokens per sequence: 1 times decode, more a causal prefill chunk (the last positions)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--heads", args->heads, "Query heads")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--kv-heads", args->kv_heads, "Key/value heads (the query heads share them evenly)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--head-dim", args->head_dim, "Head size")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed runs (after one warm-up)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--resident", args->resident,
                "One cache, read again each run (from the processor's caches where it fits): the kernel's own speed");
  return [args] { return run_attention_bench(*args); };
}

}  // namespace tessera::cli
