// `tessera bench decode-step`: decode step time, eager against the graph path (one recorded step per
// batch-size bucket, replayed), by batch size, on one backend. For each batch size both modes prefill the
// same random prompts, decode the same greedy continuations (warm-up steps first: the graph path records
// then), and time each step; the table gives the median step time with its spread, and whether the graph
// path's logits equalled eager's bit for bit over every timed step.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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

struct DecodeStepArgs {
  std::string model, tokenizer, backend = "cpu", weight_dtype;
  int threads = 1, context = 64, steps = 32, warmup = 2;
  std::vector<int> batches = {1, 2, 4, 8, 16};
};

struct ModeRun {
  std::vector<double> step_ms;
  std::vector<float> logits;  // every timed step's logits, concatenated
  std::string recorded_as = "eager";
};

Result<ModeRun> run_mode(const DecodeStepArgs& a, const model::LoadedModel& m, ops::Device& device, int batch,
                         bool graph) {
  const model::ModelConfig& c = m.config;
  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::max(batch, std::min(256, a.context));
  ro.max_sequences = batch;
  ro.graph = graph;
  // Each sequence's context + warm-up + timed steps, not the file's whole context for every sequence.
  ro.kv.prefix_cache = false;
  ro.kv.num_blocks = batch * ((a.context + a.warmup + a.steps + ro.kv.block_tokens - 1) / ro.kv.block_tokens);
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);  // CLI checked the name
  TS_ASSIGN_OR_RETURN(auto runner, engine::ModelRunner::create(device, c, m.weights, ro));
  Rng rng(7);
  std::vector<engine::SequenceKv> seqs(static_cast<size_t>(batch));
  std::vector<engine::TokenId> next(seqs.size());
  std::vector<float> logits;
  const auto vocab = static_cast<size_t>(c.vocab_size);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::vector<engine::TokenId> prompt(static_cast<size_t>(a.context));
    for (auto& t : prompt) t = static_cast<engine::TokenId>(rng.next_u32() % static_cast<uint32_t>(c.vocab_size));
    TS_RETURN_IF_ERROR(runner->prefill(seqs[i], prompt, logits));
    next[i] = static_cast<engine::TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<engine::SequenceKv*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  ModeRun out;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    TS_RETURN_IF_ERROR(runner->decode(ptrs, next, logits));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto row = logits.begin() + static_cast<std::ptrdiff_t>(i * vocab);
      next[i] = static_cast<engine::TokenId>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row);
    }
    if (step >= a.warmup) {
      out.step_ms.push_back(ms);
      out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    }
  }
  if (graph && !runner->graphs().empty())
    out.recorded_as = std::string(runner->graphs().begin()->second->replayed_as());
  return out;
}

int run_decode_step(const DecodeStepArgs& a) {
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  if (a.context + a.warmup + a.steps > model->config.max_seq_len) {
    return fail(fmt::format("--context + steps = {} exceeds the model's context of {}", a.context + a.warmup + a.steps,
                            model->config.max_seq_len));
  }
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  std::printf("model %s, backend %s (%s), weights %s, threads %d, context %d, %d timed steps after %d warm-up\n",
              model->name.c_str(), a.backend.c_str(), (*device)->info().name.c_str(),
              a.weight_dtype.empty() ? "as stored" : a.weight_dtype.c_str(), a.threads, a.context, a.steps, a.warmup);
  std::printf(
      "| batch | eager ms/step (median, min-max) | graph ms/step (median, min-max) | eager/graph | replay == eager "
      "| recorded as |\n|---|---|---|---|---|---|\n");
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  for (int b : a.batches) {
    auto eager = run_mode(a, *model, **device, b, false);
    if (!eager.ok()) return fail(eager.status().message());
    auto graph = run_mode(a, *model, **device, b, true);
    if (!graph.ok()) return fail(graph.status().message());
    const bool equal =
        eager->logits.size() == graph->logits.size() &&
        std::memcmp(eager->logits.data(), graph->logits.data(), eager->logits.size() * sizeof(float)) == 0;
    const double e = med(eager->step_ms), g = med(graph->step_ms);
    std::printf("| %d | %.3f (%.3f-%.3f) | %.3f (%.3f-%.3f) | %.2f | %s | %s |\n", b, e,
                *std::min_element(eager->step_ms.begin(), eager->step_ms.end()),
                *std::max_element(eager->step_ms.begin(), eager->step_ms.end()), g,
                *std::min_element(graph->step_ms.begin(), graph->step_ms.end()),
                *std::max_element(graph->step_ms.begin(), graph->step_ms.end()), e / g, equal ? "yes" : "NO",
                graph->recorded_as.c_str());
    std::fflush(stdout);
    if (!equal) return fail(fmt::format("batch {}: graph replay logits differ from eager", b));
  }
  return 0;
}

}  // namespace

Action add_bench_decode_step_subcommand(CLI::App& bench) {
  auto args = std::make_shared<DecodeStepArgs>();
  CLI::App* cmd = bench.add_subcommand("decode-step", "Decode step time, eager vs graph replay, by batch size");
  cmd->add_option("--model", args->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", args->backend, "Operator backend (one that records graphs)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--batch", args->batches, "Batch sizes (sequences decoded per step)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--context", args->context, "Prompt tokens per sequence before the timed steps")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "Timed decode steps per mode")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first (the graph path records in these)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", args->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  return [args] { return run_decode_step(*args); };
}

}  // namespace tessera::cli
