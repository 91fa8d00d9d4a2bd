// `tessera convert IN OUT`: rewrite a model in another format (llama2.c, GGUF, Hugging Face safetensors).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "model/loader.h"
#include "model/model_writer.h"

namespace tessera::cli {
namespace {
namespace fs = std::filesystem;

struct ConvertArgs {
  std::string in;
  std::string out;
  std::string tokenizer;
  std::string format;
  std::string dtype;
  uint64_t shard_mb = 0;
};

int run_convert(const ConvertArgs& a) {
  auto m = model::load_model(a.in, a.tokenizer, /*require_tokenizer=*/false);
  if (!m.ok()) return fail(m.status().message());
  std::string format = a.format.empty() ? model::model_format_for_path(a.out) : a.format;
  model::ModelWriteOptions o;
  if (!a.dtype.empty()) {
    auto d = parse_dtype(a.dtype);
    if (!d) return fail(fmt::format("unknown --dtype '{}' (f32, f16, bf16, q8_0, q4_0)", a.dtype));
    o.dtype = *d;
  }
  o.tokenizer = m->tokenizer.get();
  o.name = m->name;
  o.chat_template = m->chat_template;
  o.max_shard_bytes = a.shard_mb << 20;
  std::vector<std::string> notes;
  o.notes = &notes;
  if (format == "safetensors" && fs::path(m->tokenizer_path).extension() == ".json") {
    auto tj = read_file(m->tokenizer_path);
    if (tj.ok()) o.tokenizer_json = *tj;
    auto cfg = fs::path(m->tokenizer_path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (fs::exists(cfg, ec)) {
      auto tc = read_file(cfg.string());
      if (tc.ok()) o.tokenizer_config_json = *tc;
    }
  }
  if (Status s = model::write_model(format, a.out, m->config, m->weights, o); !s.ok()) return fail(s.message());
  std::fprintf(stderr, "converted %s (%s, %s) -> %s (%s)%s\n", a.in.c_str(), m->format.c_str(), m->config.arch.c_str(),
               a.out.c_str(), format.c_str(), o.tokenizer && format == "gguf" ? ", tokenizer embedded" : "");
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  return 0;
}

}  // namespace

Action add_convert_command(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Convert a model between llama2.c, GGUF and safetensors");
  cmd->add_option("in", args->in, "Model: GGUF file, HF folder, llama2.c checkpoint or a directory holding one")
      ->required();
  cmd->add_option("out", args->out, "Output: *.gguf, *.bin (llama2.c) or a folder (safetensors)")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer for the input (embedded into GGUF output)");
  cmd->add_option("--format", args->format, "Output format (default: from OUT's name)");
  cmd->add_option("--dtype", args->dtype, "Matrix type of the output (f32 f16 bf16 q8_0 q4_0)");
  cmd->add_option("--shard-mb", args->shard_mb, "safetensors: split into shards of at most this many MiB");
  return [args] { return run_convert(*args); };
}

}  // namespace tessera::cli
