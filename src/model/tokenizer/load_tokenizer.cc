#include "model/tokenizer/load_tokenizer.h"

#include <filesystem>

#include <fmt/core.h>

#include "base/mapped_file.h"

#include "model/formats/gguf/gguf_model.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/wordpiece_tokenizer.h"

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
    // BERT's tokenizer.json names a WordPiece model; everything else is read as BPE (which names what it refuses).
    TS_ASSIGN_OR_RETURN(std::string text, read_file(p.string()));
    if (text.find("\"WordPiece\"") != std::string::npos) {
      auto w = WordPieceTokenizer::load(p.string());
      if (w.ok() || w.status().code() != StatusCode::kUnimplemented ||
          w.status().message().find("is not WordPiece") == std::string::npos)
        return w.ok() ? Result<std::unique_ptr<Tokenizer>>(std::unique_ptr<Tokenizer>(std::move(*w))) : w.status();
    }
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
