// ModelRunner: the Llama forward pass, expressed as a sequence of operator calls on one Device.
//
// It never names a backend: it uploads the weights through Device::alloc and Stream::write, keeps the
// paged KV cache, and submits ops::Op values to its stream, so any backend that implements the operator
// contract runs models unchanged. Two entry points:
//   prefill(seq, tokens)  appends a chunk of one sequence's prompt, returns the last token's logits;
//   decode(seqs, tokens)  appends one token to each of several sequences, returns one row of logits each.
//
// Thread-safety: one thread drives a runner (it owns a Stream).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache.h"
#include "model/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "ops/graph.h"

namespace tessera::engine {

using model::TokenId;

struct RunnerOptions {
  int max_batch_tokens = 256;  // rows of the activation buffers: prefill chunk size and decode batch limit
  KvCacheOptions kv;           // kv.num_blocks == 0: room for max_sequences sequences of full context
  int max_sequences = 1;
  // Converts f32 weight matrices (not the embedding table, not norms or biases) to this type at load, with
  // base/quant.h. A matrix whose rows are not a whole number of quantisation blocks stays f32 (see
  // ModelRunner::converted_matrices). nullopt: weights as stored.
  std::optional<DType> weight_dtype;
  // Decode through the graph path: the first step of each batch-size bucket (powers of two up to
  // max_batch_tokens) is recorded and compiled (ops/graph.h), later steps replay it. Smaller batches are
  // padded to their bucket with rows that write to a KV block reserved for padding.
  bool graph = false;
};

class ModelRunner {
 public:
  static Result<std::unique_ptr<ModelRunner>> create(ops::Device& device, const model::ModelConfig& config,
                                                     const model::ModelWeights& weights, RunnerOptions options);
  ~ModelRunner();

  const model::ModelConfig& config() const { return config_; }
  KvCache& kv_cache() { return *kv_; }
  // How many weight matrices RunnerOptions::weight_dtype converted, and how many it had to leave in f32.
  int converted_matrices() const { return converted_; }
  int unconverted_matrices() const { return unconverted_; }
  // Bytes of the weights the forward pass reads per token (every matrix plus norms; the embedding row
  // read is negligible and not counted): what decode streams from memory per step.
  size_t weight_bytes_per_token() const { return streamed_bytes_; }
  // Compiled decode graphs so far (graph mode), by bucket.
  const std::map<int64_t, std::unique_ptr<ops::Graph>>& graphs() const { return graphs_; }

  // Appends `tokens` (any count; split into chunks internally) to `seq` and writes the logits of the last
  // one to `logits` (vocab_size floats). InvalidArgument past the model's context, ResourceExhausted when
  // KV blocks run out (seq is then unchanged).
  Status prefill(SequenceKv& seq, std::span<const TokenId> tokens, std::vector<float>& logits);

  // One token for each sequence; logits gets seqs.size() rows of vocab_size floats.
  Status decode(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens, std::vector<float>& logits);

  void release(SequenceKv& seq) { kv_->release(seq); }

 private:
  struct Layer {
    ops::Tensor attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    ops::Tensor bq, bk, bv;  // optional projection biases (Qwen2); invalid when the model has none
  };
  // Activations, sized for max_batch_tokens rows.
  struct Scratch {
    ops::Tensor x, xb, delta, q, k, v, att, hb, hb2, logits;
    ops::Tensor ids, positions, slots, block_table, block_tables, context_lens;
  };
  enum class Mode { kPrefill, kDecode };

  ModelRunner(ops::Device& device, const model::ModelConfig& config, RunnerOptions options);
  Status upload_weights(const model::ModelWeights& weights);
  Result<ops::Tensor> upload(const model::ModelWeights& weights, const std::string& name, std::vector<int64_t> shape,
                             bool matrix = false);
  // A weight matrix: uploaded in RunnerOptions::weight_dtype when that is set and possible.
  Result<ops::Tensor> upload_matrix(const model::ModelWeights& weights, const std::string& name,
                                    std::vector<int64_t> shape) {
    return upload(weights, name, std::move(shape), true);
  }
  // Like upload(), but an absent tensor yields an invalid (empty) Tensor instead of an error.
  Result<ops::Tensor> upload_optional(const model::ModelWeights& weights, const std::string& name,
                                      std::vector<int64_t> shape);
  Result<ops::Tensor> alloc(DType dtype, std::initializer_list<int64_t> shape);
  // Runs the layers for n rows whose ids/positions/slots (and block tables) are already uploaded, then
  // the classifier for rows [logit_row0, n).
  Status forward(int64_t n, Mode mode, int32_t prefill_start, int64_t logit_row0);
  Status run(const ops::Op& op);

  ops::Device& device_;
  model::ModelConfig config_;
  RunnerOptions options_;
  int max_blocks_per_seq_ = 0;
  std::unique_ptr<ops::Stream> stream_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
  ops::Tensor token_embd_, output_norm_, classifier_;
  std::vector<Layer> layers_;
  Scratch s_;
  std::unique_ptr<KvCache> kv_;
  Status decode_graph(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens, std::vector<float>& logits);
  int converted_ = 0, unconverted_ = 0;
  std::vector<ops::Op>* recording_ = nullptr;  // while recording a graph, run() also appends here
  std::map<int64_t, std::unique_ptr<ops::Graph>> graphs_;
  std::vector<ops::Buffer*> scratch_buffers_;  // the activations: what a graph's memory plan may move
  int32_t pad_block_ = -1;
  size_t streamed_bytes_ = 0;
};

}  // namespace tessera::engine
