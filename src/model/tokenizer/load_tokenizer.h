// load_tokenizer: any tokenizer file Tessera reads, recognised by content and name:
// a GGUF file (its embedded vocabulary), tokenizer.json (Hugging Face BPE), a SentencePiece .model,
// a directory holding tokenizer.json, or a llama2.c tokenizer.bin.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::model {

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);

}  // namespace tessera::model
