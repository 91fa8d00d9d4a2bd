#include "model/tokenizer/load_tokenizer.h"

#include <filesystem>

#include <fmt/core.h>

#include "model/formats/gguf/gguf_model.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"

namespace tessera::model {
namespace fs = std::filesystem;

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(fmt::format("tokenizer path does not exist: {}", path));
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "tokenizer.json", ec)) return not_found(fmt::format("no tokenizer.json in {}", path));
    p /= "tokenizer.json";
  }
  if (looks_like_gguf(p.string())) return load_gguf_tokenizer(p.string());
  if (p.extension() == ".json") {
    TS_ASSIGN_OR_RETURN(auto t, BpeTokenizer::load(p.string()));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (p.extension() == ".model") {
    TS_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::load(p.string()));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  TS_ASSIGN_OR_RETURN(auto t, Llama2cTokenizer::load(p.string()));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace tessera::model
