// `tessera bench step`: the time of one decode step by batch size, the number a continuous-batching server
// lives on. A step at batch B runs every weight matrix once as one product over B rows (ModelRunner::step),
// so its cost should grow far slower than B: the weights are read once per step whatever the batch, and only
// attention (each sequence over its own context) and the arithmetic grow with it.
//
// Every sequence of a batch starts at the same depth (--context): one sequence is prefilled with random
// tokens and its KV copied into the others (export_kv/import_kv), so a batch of 64 costs one prefill, not 64.
// Each row then decodes its own greedy tokens. Printed per batch: median step time with its min-max spread
// over --repeat runs of --steps steps, tokens per second, and the step's cost relative to batch 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "base/dtype.h"
#include "base/rng.h"
#include "commands.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct StepArgs {
  std::string model, tokenizer, backend = "cpu", weight_dtype, kv_dtype = "f32", batches = "1,2,4,8,16,32,64";
  int threads = 1, context = 256, steps = 16, repeat = 3;
};

Result<std::vector<int>> parse_batches(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int b = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), b);
    if (ec != std::errc() || end != item.data() + item.size()) b = 0;
    if (b < 1 || b > 1024) return invalid_argument(fmt::format("--batch: '{}' is not a batch size in [1, 1024]", item));
    out.push_back(b);
  }
  if (out.empty()) return invalid_argument("--batch needs at least one batch size, e.g. 1,2,4,8");
  return out;
}

int run_step_bench(const StepArgs& a) {
  auto batches = parse_batches(a.batches);
  if (!batches.ok()) return fail(batches.status().message());
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  const model::ModelConfig& c = model->config;
  const int steps_per_rep = a.steps;
  const int depth_needed = a.context + steps_per_rep * (a.repeat + 1);
  if (depth_needed > c.max_seq_len) {
    return fail(fmt::format("--context + --steps * (--repeat + 1) = {} exceeds the model's context of {}", depth_needed,
                            c.max_seq_len));
  }
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  const int max_b = *std::max_element(batches->begin(), batches->end());
  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::max({max_b, std::min(256, a.context), 1});
  ro.max_sequences = max_b;
  ro.kv.prefix_cache = false;
  const int blocks_per_seq = (depth_needed + ro.kv.block_tokens - 1) / ro.kv.block_tokens;
  ro.kv.num_blocks = blocks_per_seq * (max_b + 1);  // and the shared root sequence
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);
  ro.kv.dtype = *parse_dtype(a.kv_dtype);
  auto runner = engine::ModelRunner::create(**device, c, model->weights, ro);
  if (!runner.ok()) return fail(runner.status().message());
  engine::ModelRunner& r = **runner;

  // The shared starting point: one prefilled sequence whose KV every row of every batch copies.
  Rng rng(42);
  std::vector<engine::TokenId> prompt(static_cast<size_t>(a.context));
  for (auto& t : prompt) t = static_cast<engine::TokenId>(rng.next_u32() % static_cast<uint32_t>(c.vocab_size));
  std::vector<float> logits;
  engine::SequenceKv root;
  if (Status s = r.prefill(root, prompt, logits); !s.ok()) return fail(s.message());
  const size_t kv_row = dtype_bytes(DType::kF32, static_cast<size_t>(c.kv_dim()));
  std::vector<uint8_t> k(kv_row * static_cast<size_t>(a.context)), v(k.size());

  std::printf("model %s (%.1fM params), backend %s (%s), weights %s, kv %s, threads %d, context %d, %d steps x %d\n",
              model->name.c_str(), c.parameter_count() / 1e6, a.backend.c_str(), (*device)->info().name.c_str(),
              a.weight_dtype.empty() ? "as stored" : a.weight_dtype.c_str(), a.kv_dtype.c_str(), a.threads, a.context,
              steps_per_rep, a.repeat);
  std::printf("%6s %12s %10s %10s %12s %14s\n", "batch", "step ms", "min", "max", "tok/s", "step / batch 1");
  double base_ms = 0;
  for (int b : *batches) {
    std::vector<engine::SequenceKv> seqs(static_cast<size_t>(b));
    for (auto& s : seqs) {
      if (Status st = r.kv_cache().reserve(s, a.context); !st.ok()) return fail(st.message());
      for (int l = 0; l < c.n_layers; ++l) {
        Status st = r.export_kv(root, l, 0, a.context, DType::kF32, k.data(), v.data());
        if (st.ok()) st = r.import_kv(s, l, 0, a.context, DType::kF32, k.data(), v.data());
        if (!st.ok()) return fail(st.message());
      }
      s.length = a.context;
    }
    std::vector<engine::SequenceKv*> ptrs;
    for (auto& s : seqs) ptrs.push_back(&s);
    // Each row starts from a different token so no two rows compute the same thing.
    std::vector<engine::TokenId> next(static_cast<size_t>(b));
    for (int i = 0; i < b; ++i)
      next[static_cast<size_t>(i)] = static_cast<engine::TokenId>((i * 7919 + 1) % c.vocab_size);
    std::vector<double> step_ms;
    for (int rep = -1; rep < a.repeat; ++rep) {  // rep -1 warms caches and threads; not counted
      const auto t0 = std::chrono::steady_clock::now();
      for (int sidx = 0; sidx < steps_per_rep; ++sidx) {
        if (Status st = r.decode(ptrs, next, logits); !st.ok()) return fail(st.message());
        const auto vocab = static_cast<size_t>(c.vocab_size);
        for (size_t i = 0; i < next.size(); ++i) {
          auto row = logits.begin() + static_cast<std::ptrdiff_t>(i * vocab);
          next[i] = static_cast<engine::TokenId>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row);
        }
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps_per_rep;
      if (rep >= 0) step_ms.push_back(ms);
    }
    for (auto& s : seqs) r.release(s);
    std::sort(step_ms.begin(), step_ms.end());
    const size_t n = step_ms.size();
    const double med = n % 2 ? step_ms[n / 2] : (step_ms[n / 2 - 1] + step_ms[n / 2]) / 2;
    if (b == 1 && base_ms == 0) base_ms = med;
    const std::string rel = base_ms > 0 ? fmt::format("{:.2f}x", med / base_ms) : std::string("-");
    std::printf("%6d %12.2f %10.2f %10.2f %12.1f %14s\n", b, med, step_ms.front(), step_ms.back(), 1000.0 * b / med,
                rel.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

Action add_bench_step_subcommand(CLI::App& bench) {
  auto args = std::make_shared<StepArgs>();
  CLI::App* cmd = bench.add_subcommand("step", "Decode step time by batch size (every weight read once per step)");
  cmd->add_option("--model", args->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", args->backend, "Operator backend")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--batch", args->batches, "Comma-separated batch sizes (the first should be 1: the reference)")
      ->capture_default_str();
  cmd->add_option("--context", args->context, "Positions already cached in every sequence before the timed steps")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "Decode steps per timed run")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed runs per batch size (after one warm-up run)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", args->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache element type (llama.cpp's -ctk/-ctv types)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  return [args] { return run_step_bench(*args); };
}

}  // namespace tessera::cli
