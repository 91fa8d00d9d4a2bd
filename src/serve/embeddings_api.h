// A node's POST /v1/embeddings (api/embeddings.h for the wire shape), and which nodes serve it.
//
// A node runs one of two runners, as vLLM's --runner names them: "generate" (completions and chat) or "pooling"
// (embeddings). `tessera serve --runner auto` (the default) picks pooling when the model's files declare an
// embedding model (GGUF `{arch}.pooling_type`, or sentence-transformers' modules.json with a Pooling module) or
// when the model is an encoder (bert), generate otherwise; `--embeddings` is llama-server's spelling of
// `--runner pooling`; `--pooling mean|cls|last` sets (or overrides) the pooling type, as llama-server's
// --pooling does; `--matryoshka` lets requests ask for `dimensions` when the files cannot say so (GGUF).
// A pooling node answers completions and chat with 400, a generate node answers embeddings with 400, each
// naming the flag; /health says which runner a node is ("runner"), so a router sends each kind where it is served.
//
// An embedding request: each input is tokenized with the model's special tokens (BERT's [CLS] ... [SEP],
// Qwen3-Embedding's closing <|endoftext|>; special-token text parsed, as llama-server does) or taken as the
// token ids it is, checked against the vocabulary and the context, submitted to the engine as a pooled prompt
// (engine.h, GenerationRequest::pool) so inputs batch with each other under continuous batching, and the answer
// goes out when every input is pooled: truncated to `dimensions` and L2-normalised as the model (or the request)
// says. A client that goes away cancels its inputs, which frees their KV blocks.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "http/http.h"
#include "model/model_config.h"
#include "model/pooling.h"

namespace tessera::serve {

struct EmbeddingServing {
  bool enabled = false;  // the pooling runner: /v1/embeddings served, text generation refused
  model::PoolingType pooling = model::PoolingType::kNone;
  bool normalize = true;
  bool matryoshka = false;                 // requests may ask for `dimensions`
  std::vector<int> matryoshka_dimensions;  // when not empty, the only sizes allowed
  int dim = 0;                             // the model's embedding size
  std::string_view runner() const { return enabled ? "pooling" : "generate"; }
};

// The node's runner from `tessera serve`'s flags and what the model's files say. runner: "auto", "generate" or
// "pooling"; pooling: "" (the model's) or "mean", "cls", "last"; matryoshka: --matryoshka. InvalidArgument,
// naming the flag to use, for a combination that cannot work (an encoder asked to generate, a pooling runner
// without a pooling type).
Result<EmbeddingServing> resolve_embedding_serving(std::string_view runner, std::string_view pooling, bool matryoshka,
                                                   const model::EmbeddingSpec& spec, const model::ModelConfig& config);

ops::PoolKind pool_kind(model::PoolingType t);

struct EmbeddingsContext {
  engine::Engine& engine;
  const EmbeddingServing& serving;
  std::string model_name;                    // the id answers carry
  std::vector<std::string> model_aliases;    // more names a request may use (--served-model-name A B)
  std::function<void(int status)> finished;  // metrics: called once with the answer's HTTP status
  std::atomic<int>* calls = nullptr;         // counted while in flight (a draining node waits for zero)
  const std::atomic<bool>* draining = nullptr;
};

// Handles one request; never blocks (the answer is sent from the engine's callbacks).
void handle_embeddings(const http::Request& request, std::shared_ptr<http::ResponseWriter> writer,
                       const EmbeddingsContext& context);

}  // namespace tessera::serve
