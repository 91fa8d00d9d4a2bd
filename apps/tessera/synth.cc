// `tessera synth`: write a seeded random-weight model of a realistic shape (and, optionally, a tokenizer).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "model/llama2c/llama2c_checkpoint.h"
#include "model/synth.h"

namespace tessera::cli {
namespace {

struct SynthArgs {
  std::string shape;
  std::string format = "llama2c";
  uint64_t seed = 1;
  std::string out;
  std::string tokenizer_out;
};

int run_synth(const SynthArgs& a) {
  auto config = model::synth_shape(a.shape);
  if (!config.ok()) return fail(config.status().message());
  if (a.format != "llama2c") return fail(fmt::format("unknown format '{}'; known formats: llama2c", a.format));
  model::SynthModel m = model::synthesize_weights(*config, a.seed);
  if (Status s = model::write_llama2c_checkpoint(a.out, m.config, m.weights); !s.ok()) return fail(s.message());
  if (!a.tokenizer_out.empty()) {
    auto tok = model::synthesize_tokenizer(config->vocab_size, a.seed);
    if (Status s = write_file_atomic(a.tokenizer_out, tok->serialize()); !s.ok()) return fail(s.message());
  }
  std::fprintf(stderr,
               "wrote %s: shape %s (dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq %d), %.2fM "
               "params, seed %llu\n",
               a.out.c_str(), a.shape.c_str(), config->dim, config->hidden_dim, config->n_layers, config->n_heads,
               config->n_kv_heads, config->vocab_size, config->max_seq_len, config->parameter_count() / 1e6,
               static_cast<unsigned long long>(a.seed));
  return 0;
}

}  // namespace

Action add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a seeded random-weight model of a named shape");
  cmd->add_option("--shape", args->shape, fmt::format("One of: {}", fmt::join(model::synth_shape_names(), ", ")))
      ->required();
  cmd->add_option("--format", args->format, "Output format")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed; the same seed gives the same bytes")->capture_default_str();
  cmd->add_option("--out", args->out, "Checkpoint file to write")->required();
  cmd->add_option("--tokenizer-out", args->tokenizer_out, "Also write a matching llama2.c tokenizer here");
  return [args] { return run_synth(*args); };
}

}  // namespace tessera::cli
