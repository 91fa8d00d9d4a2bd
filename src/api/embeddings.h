// POST /v1/embeddings in OpenAI's shape (platform.openai.com/docs/api-reference/embeddings), parsed and
// answered; the node (serve/embeddings_api.h) tokenizes, computes and pools.
//
// Request: {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...], "model": "...",
//           "encoding_format"?: "float" | "base64", "dimensions"?: n, "user"?: "..."}
// plus vLLM's "normalize"?: bool and llama-server's "embd_normalize"?: -1 (none) | 2 (Euclidean, L2). "model" is
// required as OpenAI requires it (the node checks it names the served model). At most kMaxEmbeddingInputs
// inputs (OpenAI's limit); every text non-empty, every token list non-empty; fields a server knows but would
// not honour (vLLM's truncate_prompt_tokens, other embd_normalize norms) are 400s naming them.
// Answer: {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...] | "base64"}],
//          "model": "...", "usage": {"prompt_tokens": n, "total_tokens": n}}
// base64 is the vector's little-endian float32 bytes, as OpenAI's clients decode it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/openai.h"

namespace tessera::api {

inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingInput {
  bool is_tokens = false;
  std::string text;          // when !is_tokens
  std::vector<int64_t> ids;  // when is_tokens: as sent (the node checks them against its vocabulary)
};

struct EmbeddingRequest {
  std::string model;
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;
  std::optional<int> dimensions;  // > 0
  std::optional<bool> normalize;  // unset: the model's own choice
};

std::variant<EmbeddingRequest, ApiError> parse_embedding_request(std::string_view body);

// The vector a client gets from a pooled one: its first `dimensions` values when set (Matryoshka truncation),
// then divided by its Euclidean norm when `normalize` (a zero vector stays zero).
std::vector<float> shape_embedding(std::span<const float> pooled, std::optional<int> dimensions, bool normalize);

std::string base64_f32(std::span<const float> v);

std::string embedding_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                               int64_t prompt_tokens, bool base64);

}  // namespace tessera::api
