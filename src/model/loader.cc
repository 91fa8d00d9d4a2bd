#include "model/loader.h"
#include "model/hf_cache.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/llama2c/llama2c_checkpoint.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/tokenizer/load_tokenizer.h"

namespace tessera::model {
namespace fs = std::filesystem;

namespace {

struct DirectoryContents {
  std::vector<std::string> checkpoints;
  std::vector<std::string> tokenizers;
};

DirectoryContents scan_directory(const fs::path& dir) {
  DirectoryContents out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    if (looks_like_gguf(f.string()) || looks_like_llama2c_checkpoint(f.string())) {
      out.checkpoints.push_back(f.string());
    } else if (f.extension() == ".bin" && Llama2cTokenizer::load(f.string()).ok()) {
      out.tokenizers.push_back(f.string());
    }
  }
  return out;
}

Status check_vocab(const LoadedModel& m) {
  if (m.tokenizer->vocab_size() > m.config.vocab_size) {
    return invalid_argument(fmt::format("tokenizer {} has {} tokens but model {} has a vocabulary of {}",
                                        m.tokenizer_path, m.tokenizer->vocab_size(), m.checkpoint_path,
                                        m.config.vocab_size));
  }
  if (m.format == "llama2c" && m.tokenizer->vocab_size() != m.config.vocab_size) {
    return invalid_argument(fmt::format("tokenizer {} has {} tokens but model {} has a vocabulary of {}",
                                        m.tokenizer_path, m.tokenizer->vocab_size(), m.checkpoint_path,
                                        m.config.vocab_size));
  }
  return ok_status();
}

Status attach_tokenizer(LoadedModel& m, const std::string& tokenizer_path, bool required) {
  if (!tokenizer_path.empty()) {
    TS_ASSIGN_OR_RETURN(m.tokenizer, load_tokenizer(tokenizer_path));
    m.tokenizer_path = tokenizer_path;
  }
  if (!m.tokenizer) {
    if (!required) return ok_status();
    return invalid_argument(fmt::format("no tokenizer for {}: pass --tokenizer", m.checkpoint_path));
  }
  TS_RETURN_IF_ERROR(check_vocab(m));
  // The tokens that end generation: the file's list (generation_config.json) plus what the tokenizer's
  // vocabulary spells as such; llama2.c tokenizers also end at BOS, where run.c ends a story.
  std::vector<TokenId>& eog = m.generation.end_of_generation;
  const std::vector<TokenId> from_vocab = vocab_end_of_generation(*m.tokenizer);
  eog.insert(eog.end(), from_vocab.begin(), from_vocab.end());
  if (m.tokenizer->kind() == "llama2c" && m.tokenizer->bos_id() >= 0) eog.push_back(m.tokenizer->bos_id());
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  return ok_status();
}

Result<LoadedModel> load_model_path(const std::string& model_path, const std::string& tokenizer_path,
                                    bool require_tokenizer);

}  // namespace

Result<LoadedModel> load_model(const std::string& reference, const std::string& tokenizer_path,
                               bool require_tokenizer) {
  std::error_code ec;
  if (!fs::exists(reference, ec) && !looks_like_repo_id(reference))
    return not_found(fmt::format("model path does not exist: {}", reference));
  TS_ASSIGN_OR_RETURN(ModelReference ref, resolve_model_reference(reference));
  TS_ASSIGN_OR_RETURN(LoadedModel m, load_model_path(ref.path, tokenizer_path, require_tokenizer));
  if (!ref.repo_id.empty()) m.name = ref.repo_id;  // served as vLLM serves a hub model: by its repository id
  return m;
}

namespace {

Result<LoadedModel> load_model_path(const std::string& model_path, const std::string& tokenizer_path,
                                    bool require_tokenizer) {
  std::error_code ec;
  // Formats are recognised by reading the first bytes: a FIFO or a device there would block that read (a named pipe
  // with no writer never answers), so only regular files and directories are opened.
  for (const std::string& p : {model_path, tokenizer_path}) {
    const fs::file_status st = fs::status(p, ec);
    if (!p.empty() && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st))
      return invalid_argument(fmt::format("not a regular file or directory: {}", p));
  }
  LoadedModel m;
  if (looks_like_hf_folder(model_path)) {
    TS_ASSIGN_OR_RETURN(HfModel hf, load_hf_model(model_path));
    m.name = fs::path(model_path).lexically_normal().filename().string();
    if (m.name.empty() || m.name == ".") m.name = fs::path(model_path).lexically_normal().parent_path().filename();
    m.checkpoint_path = model_path;
    m.format = "safetensors";
    m.config = hf.config;
    m.weights = std::move(hf.weights);
    m.tokenizer = std::move(hf.tokenizer);
    m.tokenizer_path = (fs::path(model_path) / "tokenizer.json").string();
    m.chat_template = std::move(hf.chat_template);
    m.chat_template_tool_use = std::move(hf.chat_template_tool_use);
    m.embedding = hf.embedding;
    if (const fs::path gc = fs::path(model_path) / "generation_config.json"; fs::exists(gc, ec)) {
      TS_ASSIGN_OR_RETURN(std::string text, read_file(gc.string()));
      auto g = parse_generation_config(text, m.config.vocab_size);
      if (!g.ok()) return g.status().with_context(gc.string());
      m.generation = std::move(*g);
    }
    TS_RETURN_IF_ERROR(attach_tokenizer(m, tokenizer_path, require_tokenizer));
    return m;
  }
  std::string tok_path = tokenizer_path;
  if (fs::is_directory(model_path, ec)) {
    DirectoryContents dir = scan_directory(model_path);
    if (dir.checkpoints.size() != 1) {
      return invalid_argument(
          dir.checkpoints.empty()
              ? fmt::format("no llama2.c checkpoint, GGUF file or config.json found in directory {}", model_path)
              : fmt::format("directory {} holds {} checkpoints ({}); pass one file with --model", model_path,
                            dir.checkpoints.size(), fmt::join(dir.checkpoints, ", ")));
    }
    m.checkpoint_path = dir.checkpoints[0];
    if (tok_path.empty() && !looks_like_gguf(m.checkpoint_path)) {
      if (dir.tokenizers.size() == 1) {
        tok_path = dir.tokenizers[0];
      } else if (require_tokenizer) {
        return invalid_argument(
            dir.tokenizers.empty()
                ? fmt::format("no llama2.c tokenizer found in directory {}; pass --tokenizer", model_path)
                : fmt::format("directory {} holds {} tokenizers ({}); choose one with --tokenizer", model_path,
                              dir.tokenizers.size(), fmt::join(dir.tokenizers, ", ")));
      }
    }
  } else {
    m.checkpoint_path = model_path;
  }
  m.name = fs::path(m.checkpoint_path).stem().string();

  if (looks_like_gguf(m.checkpoint_path)) {
    TS_ASSIGN_OR_RETURN(GgufModel g, load_gguf_model(m.checkpoint_path));
    m.format = "gguf";
    m.config = g.config;
    m.weights = std::move(g.weights);
    m.tokenizer = std::move(g.tokenizer);
    m.tokenizer_path = m.checkpoint_path;
    m.chat_template = std::move(g.chat_template);
    m.chat_template_tool_use = std::move(g.chat_template_tool_use);
    m.generation = std::move(g.generation);
    m.embedding.pooling = g.pooling;  // normalised: llama-server's default, which the file cannot override
    TS_RETURN_IF_ERROR(attach_tokenizer(m, tok_path, require_tokenizer));
    return m;
  }

  if (tok_path.empty() && require_tokenizer) {
    return invalid_argument(
        fmt::format("no tokenizer for {}: pass --tokenizer, or --model a directory holding one", model_path));
  }
  TS_ASSIGN_OR_RETURN(Llama2cCheckpoint ckpt, load_llama2c_checkpoint(m.checkpoint_path));
  m.format = "llama2c";
  m.config = ckpt.config;
  m.weights = std::move(ckpt.weights);
  TS_RETURN_IF_ERROR(attach_tokenizer(m, tok_path, require_tokenizer));
  return m;
}

}  // namespace

}  // namespace tessera::model
