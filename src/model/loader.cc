#include "model/loader.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "model/llama2c/llama2c_checkpoint.h"
#include "model/tokenizer/llama2c_tokenizer.h"

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
    if (looks_like_llama2c_checkpoint(f.string())) {
      out.checkpoints.push_back(f.string());
    } else if (f.extension() == ".bin" && Llama2cTokenizer::load(f.string()).ok()) {
      out.tokenizers.push_back(f.string());
    }
  }
  return out;
}

}  // namespace

Result<LoadedModel> load_model(const std::string& model_path, const std::string& tokenizer_path) {
  std::error_code ec;
  if (!fs::exists(model_path, ec)) return not_found(fmt::format("model path does not exist: {}", model_path));
  LoadedModel m;
  std::string tok_path = tokenizer_path;
  if (fs::is_directory(model_path, ec)) {
    DirectoryContents dir = scan_directory(model_path);
    if (dir.checkpoints.size() != 1) {
      return invalid_argument(dir.checkpoints.empty()
                                  ? fmt::format("no llama2.c checkpoint found in directory {}", model_path)
                                  : fmt::format("directory {} holds {} checkpoints ({}); pass one file with --model",
                                                model_path, dir.checkpoints.size(), fmt::join(dir.checkpoints, ", ")));
    }
    m.checkpoint_path = dir.checkpoints[0];
    if (tok_path.empty()) {
      if (dir.tokenizers.size() != 1) {
        return invalid_argument(
            dir.tokenizers.empty()
                ? fmt::format("no llama2.c tokenizer found in directory {}; pass --tokenizer", model_path)
                : fmt::format("directory {} holds {} tokenizers ({}); choose one with --tokenizer", model_path,
                              dir.tokenizers.size(), fmt::join(dir.tokenizers, ", ")));
      }
      tok_path = dir.tokenizers[0];
    }
  } else {
    m.checkpoint_path = model_path;
  }
  if (tok_path.empty()) {
    return invalid_argument(
        fmt::format("no tokenizer for {}: pass --tokenizer, or --model a directory holding one", model_path));
  }

  TS_ASSIGN_OR_RETURN(Llama2cCheckpoint ckpt, load_llama2c_checkpoint(m.checkpoint_path));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Llama2cTokenizer> tok, Llama2cTokenizer::load(tok_path));
  if (tok->vocab_size() != ckpt.config.vocab_size) {
    return invalid_argument(fmt::format("tokenizer {} has {} tokens but model {} has a vocabulary of {}", tok_path,
                                        tok->vocab_size(), m.checkpoint_path, ckpt.config.vocab_size));
  }
  m.name = fs::path(m.checkpoint_path).stem().string();
  m.tokenizer_path = tok_path;
  m.config = ckpt.config;
  m.weights = std::move(ckpt.weights);
  m.tokenizer = std::move(tok);
  return m;
}

}  // namespace tessera::model
