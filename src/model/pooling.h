// Embedding models: how a model's final hidden states become one vector, as the model's own files state it.
//
// PoolingType carries llama.cpp's values (GGUF `{arch}.pooling_type`): none 0, mean 1, cls 2, last 3, rank 4.
// EmbeddingSpec is what a loader learns about serving a model as an embedding model:
//  - GGUF: `{arch}.pooling_type`; L2 normalisation always (llama-server's default, embd_normalize 2), since
//    the file cannot say otherwise.
//  - Hugging Face folders: sentence-transformers' modules.json names a Pooling module whose folder holds
//    config.json (pooling_mode_cls_token / _mean_tokens / _lasttoken, or pooling_mode "cls"/"mean"/"lasttoken"),
//    and, for normalised embeddings, a Normalize module; config.json's `is_matryoshka` / `matryoshka_dimensions`
//    (vLLM's keys) allow requests to ask for fewer dimensions.
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::model {

enum class PoolingType : uint8_t { kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };

std::string_view pooling_name(PoolingType t);  // "none", "mean", "cls", "last", "rank"
// "none", "mean", "cls", "last" (also "lasttoken", sentence-transformers' name); InvalidArgument otherwise
// ("rank", the reranker head, is not served).
Result<PoolingType> parse_pooling(std::string_view name);
// GGUF's integer; InvalidArgument for values outside 0..4, Unimplemented for rank.
Result<PoolingType> pooling_from_gguf(int64_t value);

struct EmbeddingSpec {
  PoolingType pooling = PoolingType::kNone;  // kNone: the files state no pooling (not an embedding model)
  bool normalize = true;                     // L2-normalise the pooled vector
  // Matryoshka representation learning: a request may ask for `dimensions` (the first d values, renormalised).
  bool matryoshka = false;
  std::vector<int> matryoshka_dimensions;  // when not empty, the only sizes a request may ask for
  bool declared() const { return pooling != PoolingType::kNone; }
};

// The sentence-transformers files of a Hugging Face folder (modules.json and the Pooling module's config),
// and config.json's matryoshka keys. A folder without modules.json gives an undeclared spec. InvalidArgument
// for malformed files, Unimplemented for pooling modes Tessera does not compute (max, weightedmean, ...).
Result<EmbeddingSpec> read_sentence_transformers(const std::string& dir);
// The files that describe `spec` to sentence-transformers (and to read_sentence_transformers()): path
// relative to the model folder (ending in '/' for a folder to create empty), and contents. Nothing when the spec
// declares no pooling.
std::vector<std::pair<std::string, std::string>> sentence_transformers_files(const EmbeddingSpec& spec);

}  // namespace tessera::model
