// `tessera generate`: load a model, generate from a prompt, stream text to stdout, speed to stderr.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "backend_auto.h"
#include "base/dtype.h"
#include "commands.h"
#include "engine/generator.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::string backend = "auto";
  int max_tokens = 256;
  int steps = 0;
  int ctx_size = 0;                 // 0: the model's context
  engine::SamplingParams sampling;  // --temperature, --top-p, --top-k, --seed
  int threads = 0;
  std::string weight_dtype;
  std::string kv_dtype = "f16";  // half the bytes attention reads per token; f32 stays selectable
  std::string graph = "off";
  bool deterministic = false;
  bool no_echo = false;
  bool quiet = false;
};

int run_generate(const GenerateArgs& a) {
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  if (a.ctx_size > 0) {
    // llama.cpp's -c: a file's recorded context may be shorter than the model was trained for (llama.cpp's own
    // llama2.c converter records 128 whatever the checkpoint says), so a longer one is allowed, with a warning.
    if (a.ctx_size > model->config.max_seq_len && !a.quiet)
      std::fprintf(stderr, "tessera generate: warning: --ctx-size %d exceeds the %d positions the model file records\n",
                   a.ctx_size, model->config.max_seq_len);
    model->config.max_seq_len = a.ctx_size;
  }
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto chosen = open_backend(a.backend, model->config, model->weights, dopts, *parse_dtype(a.kv_dtype));
  if (!chosen.ok()) return fail(chosen.status().message());
  auto& device = chosen->device;

  engine::GenerateOptions go;
  go.max_tokens = a.max_tokens;
  go.echo_prompt = !a.no_echo;
  go.sampling = a.sampling;
  go.end_of_generation = model->generation.end_of_generation;
  const int prompt_len = static_cast<int>(model->tokenizer->encode(a.prompt, true).size());
  if (a.steps > 0) {
    // run.c's --steps: total positions, prompt (with BOS) included, capped by the context.
    int steps = std::min(a.steps, model->config.max_seq_len);
    if (steps < prompt_len) {
      return fail(fmt::format("--steps {} is shorter than the prompt ({} tokens with BOS)", steps, prompt_len));
    }
    go.max_tokens = steps - prompt_len + 1;
  }

  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::min(512, model->config.max_seq_len);
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);
  ro.kv.dtype = *parse_dtype(a.kv_dtype);
  // The one sequence's positions (prompt + new tokens, at most the context), not the whole context the file records
  // (llama3.1-8b: 131072 positions, 17 GB of f16 KV).
  const int64_t positions = std::min<int64_t>(model->config.max_seq_len, int64_t{prompt_len} + go.max_tokens);
  ro.kv.num_blocks = static_cast<int>(std::max<int64_t>(1, (positions + ro.kv.block_tokens - 1) / ro.kv.block_tokens));
  ro.graph = a.graph == "on";
  ro.deterministic = a.deterministic;
  auto runner = engine::ModelRunner::create(*device, model->config, model->weights, ro);
  if (!runner.ok()) return fail(runner.status().message());
  auto stats = engine::generate(**runner, *model->tokenizer, a.prompt, go, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!stats.ok()) return fail(stats.status().message());
  if (!a.quiet) {
    const auto& s = *stats;
    double prefill_tps = s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0;
    double decode_tps = s.decode_seconds > 0 ? s.decode_steps / s.decode_seconds : 0.0;
    std::fprintf(stderr,
                 "model %s (%s, %.2fM params) on %s | prefill: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s\n",
                 model->name.c_str(), model->config.arch.c_str(), model->config.parameter_count() / 1e6,
                 device->info().backend.c_str(), s.prompt_tokens, prefill_tps, s.generated_tokens, decode_tps);
    // After the run, so that a failing command's error stays its only line.
    if (!chosen->reason.empty()) std::fprintf(stderr, "backend %s\n", chosen->reason.c_str());
  }
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt on one backend");
  cmd->add_option("--model", args->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--prompt", args->prompt, "Prompt text (default: empty)");
  cmd->add_option("--ctx-size", args->ctx_size,
                  "Positions per sequence (default: the model's context); more than the file records is allowed, "
                  "with a warning, as llama.cpp's -c")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-tokens", args->max_tokens, "New tokens to generate")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--steps", args->steps,
                  "Total positions including the prompt and BOS, as llama2.c's run.c counts (overrides --max-tokens)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->sampling.temperature, "0 is greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option_function<uint64_t>(
      "--seed", [args](const uint64_t& seed) { args->sampling.seed = seed; },
      "Random seed (0 is a seed like any other; without one, a random seed)");
  cmd->add_option("--backend", args->backend,
                  "Operator backend (auto: the fastest here that runs the model's weight types)")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", args->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache element type (llama.cpp's -ctk/-ctv types)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  cmd->add_option("--graph", args->graph, "Decode by recording, compiling and replaying one step per batch bucket")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--deterministic", args->deterministic,
                "The prompt attends through the decode kernels (as tessera serve --deterministic): the same bits "
                "however it is chunked");
  cmd->add_flag("--no-echo", args->no_echo, "Do not print the prompt before the generated text");
  cmd->add_flag("--quiet", args->quiet, "Do not print speed to stderr");
  return [args] { return run_generate(*args); };
}

}  // namespace tessera::cli
