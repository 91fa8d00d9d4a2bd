// The tokenizer a GGUF file embeds (`tokenizer.ggml.*`), read as llama.cpp reads it, from any GGUF: a
// whole model or a vocab-only file with no tensors (llama.cpp's models/ggml-vocab-*.gguf).
//
// `tokenizer.ggml.model` llama (SentencePiece BPE: SpmTokenizer), gpt2 (byte-level BPE: BpeTokenizer,
// with the pre-tokenizer `tokenizer.ggml.pre` names, gguf_pre_tokenizers.h) and bert (WordPiece:
// WordPieceTokenizer, normaliser flags `tokenizer.ggml.normalizer.*`) are supported; any other model
// or pre-tokenizer is an Unimplemented error that names it. The reader also applies llama.cpp's defaults
// and fix-ups that the file does not state: add_bos/add_eos per type unless `add_bos_token` /
// `add_eos_token` say otherwise, end-of-turn tokens ("<|im_end|>", "<|eot_id|>", ...) made control tokens,
// and Phi-3's special tokens swallowing the whitespace after them.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {

// The vocabulary of parsed GGUF contents; NotFound when the file has no `tokenizer.ggml.model`.
Result<Vocab> read_gguf_vocab(const GgufContents& contents);

// Reads only the header of the GGUF file at `path` and builds its tokenizer.
Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path);

}  // namespace tessera::model
