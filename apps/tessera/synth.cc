// `tessera synth`: write a seeded random-weight model of a realistic shape in any format (and, optionally,
// a llama2.c tokenizer). GGUF files embed the matching tokenizer.
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "model/synth_gemma4.h"

namespace tessera::cli {
namespace {

struct SynthArgs {
  std::string shape;
  std::string format = "llama2c";
  std::string dtype;
  uint64_t seed = 1;
  int layers = 0;
  int max_seq_len = 0;
  int dim = 0;
  int hidden_dim = 0;
  int sliding_window = -1;
  bool rare_byte_tokens = false;
  bool decisive = false;
  double token_lead = 0.0;
  bool small = false;
  std::string out;
  std::string tokenizer_out;
};

// Gemma 4 shapes are drawn straight into GGUF (model/synth_gemma4.h), in llama.cpp's converter's layout; a Hugging
// Face folder is that file read back and written as transformers lays Gemma 4 out (hf_gemma4.h), so both formats
// hold the same weights.
int run_synth_gemma4(const SynthArgs& a) {
  if (a.format != "gguf" && a.format != "safetensors")
    return fail(fmt::format("{} is written as GGUF or safetensors (--format gguf | safetensors)", a.shape));
  if (a.token_lead > 0)
    return fail("--token-lead is not supported for gemma4 shapes (their per-layer writes are not scaled by synth)");
  auto shape = model::gemma4_shape(a.shape, a.small);
  if (!shape.ok()) return fail(shape.status().message());
  if (a.max_seq_len > 0) shape->max_seq_len = a.max_seq_len;
  if (Status s = model::resize_gemma4_shape(*shape, a.layers, a.dim, a.hidden_dim, a.sliding_window); !s.ok())
    return fail(s.message());
  model::Gemma4WriteOptions o;
  o.rare_byte_tokens = a.rare_byte_tokens;
  if (a.decisive) {  // their classifier is tied: the residual leans on the embedding instead, attention is softer
    o.post_norm_scale = 0.25f;
    o.q_norm_scale = 0.25f;
    o.router_scale = 8.0f * std::sqrt(static_cast<float>(shape->dim));  // experts chosen by clear margins
  }
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d || (*d != DType::kF32 && *d != DType::kF16 && *d != DType::kBF16))
      return fail(fmt::format("--dtype '{}': gemma4 shapes are written in f32, f16 or bf16", a.dtype));
    o.matrix_dtype = *d;
  }
  const bool hf = a.format == "safetensors";
  const std::string gguf_path = hf ? a.out + "/.synth-tmp.gguf" : a.out;  // inside the folder, removed below
  if (std::error_code ec; hf && !std::filesystem::create_directories(a.out, ec) && ec)
    return fail(fmt::format("cannot create {}: {}", a.out, ec.message()));
  if (Status s = model::write_gemma4_gguf(*shape, a.seed, o, gguf_path); !s.ok()) return fail(s.message());
  if (hf) {
    Status s = [&]() -> Status {
      TS_ASSIGN_OR_RETURN(model::GgufModel g, model::load_gguf_model(gguf_path));
      model::ModelWriteOptions w;
      w.name = "synth-" + a.shape;
      return model::write_model("safetensors", a.out, g.config, g.weights, w);
    }();
    std::error_code ec;
    std::filesystem::remove(gguf_path, ec);
    if (!s.ok()) return fail(s.message());
  }
  std::fprintf(stderr,
               "wrote %s (%s): shape %s (arch gemma4, dim %d, %d layers of which %d reuse KV, %d heads, head sizes "
               "%d/%d, vocab %d, per-layer embeddings %d, experts %d), seed %llu\n",
               a.out.c_str(), a.format.c_str(), a.shape.c_str(), shape->dim, shape->n_layers, shape->shared_kv_layers,
               shape->n_heads, shape->head_dim_swa, shape->head_dim_full, shape->vocab_size, shape->per_layer_dim,
               shape->n_experts, static_cast<unsigned long long>(a.seed));
  if (hf)
    std::fprintf(stderr,
                 "note: no tokenizer.json (the synthetic gemma4 vocabulary lives in GGUF files): pass --tokenizer "
                 "with a GGUF file of the same shape and seed\n");
  return 0;
}

int run_synth(const SynthArgs& a) {
  if (model::is_gemma4_shape(a.shape)) return run_synth_gemma4(a);
  auto config = a.small ? model::synth_shape_small(a.shape) : model::synth_shape(a.shape);
  if (!config.ok()) return fail(config.status().message());
  if (a.layers > 0) config->n_layers = a.layers;
  if (a.max_seq_len > 0) config->max_seq_len = a.max_seq_len;
  if (Status s = model::resize_synth_shape(*config, a.dim, a.hidden_dim, a.sliding_window); !s.ok())
    return fail(s.message());
  model::ModelWriteOptions o;
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d)
      return fail(fmt::format(
          "unknown --dtype '{}' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k)",
          a.dtype));
    o.dtype = *d;
  }
  if (a.format == "llama2c" && config->arch != "llama")  // before minutes of synthesis, not after
    return fail(fmt::format("llama2.c checkpoints hold llama models without biases, not {}", config->arch));
  if (Status s = config->validate(); !s.ok()) return fail(s.message());
  // An f16/bf16 file is drawn straight into that type (half the memory of f32 for shapes of billions of weights);
  // bert shapes are small and are drawn in f32, then written as the writer converts them.
  std::optional<DType> held;
  if ((o.dtype == DType::kF16 || o.dtype == DType::kBF16) && config->arch != "bert") held = o.dtype;
  // Every weight is drawn in memory before the writer converts it: a shape too large for the host is an error, not an
  // abort (llama3.1-8b in f32 is 32 GB).
  std::optional<model::SynthModel> drawn;
  try {
    drawn.emplace(model::synthesize_weights(*config, a.seed,
                                            {.rare_byte_tokens = a.rare_byte_tokens,
                                             .decisive = a.decisive,
                                             .token_lead = a.token_lead,
                                             .matrix_dtype = held}));
  } catch (const std::bad_alloc&) {
    const double params = static_cast<double>(config->parameter_count());
    return fail(fmt::format(
        "not enough memory to synthesise {}: its {:.2f}B parameters are drawn in memory as {} before they are written "
        "({:.1f} GiB); pass fewer --layers{}",
        a.shape, params / 1e9, held ? dtype_name(*held) : "f32", params * (held ? 2 : 4) / (1 << 30),
        held ? "" : ", or write --dtype f16 (half that) and quantise that file (llama-quantize)"));
  }
  model::SynthModel& m = *drawn;
  // bert shapes get a WordPiece vocabulary (tokenizer.json in an HF folder), the others llama2.c's.
  std::unique_ptr<model::Llama2cTokenizer> tok;
  std::unique_ptr<model::WordPieceTokenizer> wordpiece;
  if (config->arch == "bert") {
    if (config->vocab_size < 200) return fail("bert shapes need a vocabulary of at least 200 tokens");
    wordpiece = model::synthesize_wordpiece_tokenizer(config->vocab_size, a.seed);
    o.tokenizer = wordpiece.get();
    if (a.format == "safetensors") o.tokenizer_json = wordpiece->tokenizer_json();
  } else {
    tok = model::synthesize_tokenizer(config->vocab_size, a.seed, config->arch);
    o.tokenizer = tok.get();
  }
  o.embedding = model::synth_embedding(a.shape);
  // Qwen3-Embedding's tokenizer ends every input with <|endoftext|>: the synthetic vocabulary appends its EOS.
  if (o.embedding.pooling == model::PoolingType::kLast) o.vocab_add_eos = true;
  o.name = "synth-" + a.shape;
  std::vector<std::string> notes;
  o.notes = &notes;
  if (Status s = model::write_model(a.format, a.out, m.config, m.weights, o); !s.ok()) return fail(s.message());
  if (!a.tokenizer_out.empty()) {
    std::vector<uint8_t> bytes;
    if (wordpiece) {
      const std::string json = wordpiece->tokenizer_json();
      bytes.assign(json.begin(), json.end());
    } else {
      bytes = tok->serialize();
    }
    if (Status s = write_file_atomic(a.tokenizer_out, bytes); !s.ok()) return fail(s.message());
  }
  std::fprintf(stderr,
               "wrote %s (%s): shape %s (arch %s, dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq "
               "%d), %.2fM params, seed %llu\n",
               a.out.c_str(), a.format.c_str(), a.shape.c_str(), config->arch.c_str(), config->dim, config->hidden_dim,
               config->n_layers, config->n_heads, config->n_kv_heads, config->vocab_size, config->max_seq_len,
               config->parameter_count() / 1e6, static_cast<unsigned long long>(a.seed));
  if (a.token_lead > 0)
    notes.push_back(fmt::format("--token-lead {} scaled the residual writes by {:.4g}", a.token_lead,
                                model::decisive_write_scale(m.config, a.token_lead)));
  if (config->has_moe_layers())
    std::fprintf(stderr, "experts: %d of %d per token, %d wide; %.2fM params active per token\n",
                 config->moe.n_experts_used, config->moe.n_experts, config->moe.expert_hidden_dim,
                 config->active_parameter_count() / 1e6);
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  return 0;
}

}  // namespace

Action add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a seeded random-weight model of a named shape");
  cmd->add_option("--shape", args->shape,
                  fmt::format("One of: {}, {}", fmt::join(model::synth_shape_names(), ", "),
                              fmt::join(model::gemma4_shape_names(), ", ")))
      ->required();
  cmd->add_option("--format", args->format,
                  fmt::format("Output format: {}", fmt::join(model::model_format_names(), ", ")))
      ->capture_default_str();
  cmd->add_option(
      "--dtype", args->dtype,
      "Matrix type (gguf: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k; safetensors: f32 f16 bf16)");
  cmd->add_option("--seed", args->seed, "Seed; the same seed gives the same bytes")->capture_default_str();
  cmd->add_option("--layers", args->layers, "Override the shape's layer count (smaller test models)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-seq-len", args->max_seq_len, "Override the shape's context length (longer prompts)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--dim", args->dim,
                  "Override the residual width (heads follow it at the shape's head_dim), e.g. 256 for K-quant rows")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hidden-dim", args->hidden_dim, "Override the feed-forward width")->check(CLI::PositiveNumber);
  cmd->add_option("--sliding-window", args->sliding_window, "Override the sliding window (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--rare-byte-tokens", args->rare_byte_tokens,
                "Make the byte-fallback tokens unlikely outputs, so greedy text is valid UTF-8 (llama.cpp parity)");
  cmd->add_flag(
      "--decisive", args->decisive,
      "An untied classifier leaning on the token embedding (gemma4: post and query norms at a quarter): clear "
      "winners, few near ties (llama.cpp parity)");
  cmd->add_option("--token-lead", args->token_lead,
                  "Scale the layers' residual writes so the current token leads the logits by about this many "
                  "deviations (e.g. 10; llama.cpp parity at full width)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--small", args->small,
                "The shape's family at test size (dim 64, head_dim 32, vocab 512, every feature kept)");
  cmd->add_option("--out", args->out, "File to write (a folder for safetensors)")->required();
  cmd->add_option("--tokenizer-out", args->tokenizer_out,
                  "Also write the matching tokenizer here (llama2.c's format; tokenizer.json for bert shapes)");
  return [args] {
    // The paths that do not say more (gemma4's, the writers): every weight is held in memory while the file is written.
    try {
      return run_synth(*args);
    } catch (const std::bad_alloc&) {
      return fail(
          fmt::format("not enough memory to synthesise {} (its weights are held in memory while the file is "
                      "written); pass fewer --layers",
                      args->shape));
    }
  };
}

}  // namespace tessera::cli
