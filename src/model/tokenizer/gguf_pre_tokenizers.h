// The byte-level BPE pre-tokenizers that GGUF files name in `tokenizer.ggml.pre`, as llama.cpp defines them
// (src/llama-vocab.cpp), with the regexes of the tokenizer.json files they were made from.
//
// A pre-tokenizer is a list of regexes applied in order; each splits every piece the previous one left into
// its matches and the text between them (Hugging Face's Split with behavior Isolated), and the final pieces
// are the words BPE merges within. Some types also change defaults (Llama 3 adds BOS; it and a few others
// look a whole word up before merging). A name not in the table is an Unimplemented error that names it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::model {

struct GgufPreTokenizer {
  std::string name;                  // the canonical llama.cpp type this name resolves to
  std::vector<std::string> regexes;  // PCRE2 syntax (UTF + UCP)
  bool ignore_merges = false;        // a word that is a whole token is that token
  bool add_bos = false;              // llama.cpp's add_bos default for the type
  bool nfc = false;                  // the tokenizer.json normalises to NFC first (Qwen)
};

Result<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name);
// Every accepted `tokenizer.ggml.pre` value, sorted (for messages and tests).
std::vector<std::string> gguf_pre_tokenizer_names();

}  // namespace tessera::model
