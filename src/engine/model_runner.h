// ModelRunner: the decoder forward pass of every supported family (model/model_config.h), expressed as a
// sequence of operator calls on one Device.
//
// It never names a backend: it uploads the weights through Device::alloc and Stream::write, keeps the
// paged KV cache, and submits ops::Op values to its stream, so any backend that implements the operator
// contract runs models unchanged. The general entry point is step(): one batch made of segments, each a
// run of new tokens for one sequence (a prefill chunk, or the single next token of a decoding sequence);
// all rows share the matrix products, attention runs per segment. prefill() and decode() are conveniences.
// Every row is computed the same way whatever else is in the batch, so batching never changes results.
//
// Thread-safety: one thread drives a runner (it owns a Stream).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
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

// New tokens for one sequence in a step(). want_logits: return the logits of the segment's last token.
struct Segment {
  SequenceKv* seq = nullptr;
  std::span<const TokenId> tokens;
  bool want_logits = true;
  // When set, the logits of every token of the segment (vLLM's prompt_logprobs), handed over before step()
  // returns in runs of consecutive rows: `first` is the first row's index in `tokens`, each row vocab_size
  // floats. Such a step always runs eagerly.
  std::function<void(int first, std::span<const float> rows)> all_logits;
  // Embeddings: when set, the final hidden states of the segment's rows (after the output norm; an encoder's
  // last layer) are pooled by `pool` (ops::PoolOp) and handed over, dim floats, before step() returns. An
  // encoder (non-causal) model computes a whole input in one segment starting at position 0, with no logits.
  std::function<void(std::span<const float> pooled)> pooled;
  ops::PoolKind pool = ops::PoolKind::kLast;
  // Hybrid models: for each of the first num_states entries, the recurrent state after `position` (in (seq->length,
  // its end], increasing) is copied to `out` (KvCache::state_bytes_per_slot() bytes, export_state's layout) as each
  // linear layer passes it: a state checkpoint (KvCache) taken inside the step, bit for bit the state a step ending
  // there would leave.
  struct StateOut {
    int32_t position = 0;
    uint8_t* out = nullptr;
  };
  std::array<StateOut, kMaxStepCheckpoints> states{};
  int num_states = 0;
};

// Debugging parity with another engine on the same file: the activations of one step at a named point of one
// layer (layer -1: after the last), `rows` rows of values.size() / rows floats each.
using ActivationTap =
    std::function<void(std::string_view name, int layer, int64_t rows, std::span<const float> values)>;

struct RunnerOptions {
  int max_batch_tokens = 256;  // rows of the activation buffers: prefill chunk size and decode batch limit
  KvCacheOptions kv;           // kv.num_blocks == 0: room for max_sequences sequences of full context
  int max_sequences = 1;
  // Rows of the logits buffer, i.e. how many sequences one step can sample (0: max_batch_tokens; rounded up to a
  // power of two for the graph path's buckets, at most max_batch_tokens). A server whose token budget for prompt
  // chunks is much larger than its sequence limit sets this to that limit: logits are vocab floats per row, so
  // sizing them by a 2048-token budget would cost 262 MB for a 32000-token vocabulary and 1.2 GB for Qwen's.
  int max_logit_rows = 0;
  // Converts f32 weight matrices (not the embedding table, not norms or biases) to this type at load, with
  // base/quant.h. A matrix whose rows are not a whole number of quantisation blocks stays f32 (see
  // ModelRunner::converted_matrices). nullopt: weights as stored.
  std::optional<DType> weight_dtype;
  // Decode through the graph path: the first step of each batch-size bucket (powers of two up to
  // max_batch_tokens) is recorded and compiled (ops/graph.h), later steps replay it. Smaller batches are
  // padded to their bucket with rows that write to a KV block reserved for padding. Needs a device whose
  // DeviceInfo::supports_graphs is true (create() refuses otherwise): replays launch its native recording.
  bool graph = false;
  // Every prompt row's attention through the decode kernels, as the decode of its position (one AttentionDecodeOp
  // over every row of the step, each row with its own context length), instead of the prefill kernels. A
  // position's attention then has the same bits however it was reached: in a prompt chunk of any size, decoded,
  // or read back from blocks a decode filled (a prefix-cache hit on a previous reply). Rows already have the same
  // bits in every batch and at every thread count; with this, a reply does not depend on what the prefix cache held
  // either (the prefill and decode kernels of the vector builds sum in other orders and agree within float
  // rounding: DecodeInvariance.APrefillRowAgreesWithTheDecodeOfTheSamePosition). Prefill attention reads each
  // row's context once per row instead of once per tile of rows: slower prompts (docs/benchmarks.md,
  // "Deterministic mode"). `tessera serve --deterministic`.
  bool deterministic = false;
  // When set, every step runs eagerly and forward() synchronises at each named point and hands that point's
  // activations to the tap. The names are those of llama.cpp's graph callbacks, so that a dump of its tensors
  // (llama-eval-callback) lines up: attn_norm, Qcur and Kcur (after rotary), Vcur, kqv_out (attention, before
  // the output matrix), ffn_inp, ffn_norm, ffn_out, l_out, result_norm. Empty (off) by default; `tessera serve`
  // sets it from TESSERA_DUMP_ACTIVATIONS (engine/activation_dump.h).
  ActivationTap activation_tap;
};

// The storage types among `weights` that `device` has no matmul kernel for (ModelRunner widens those to f32
// at load, at f32's memory and bandwidth cost); empty: it runs every weight as stored. `tessera serve --backend
// auto` asks this of each backend.
std::vector<DType> widened_weight_types(ops::Device& device, const model::ModelWeights& weights);

// "" when `device` runs what serving embeddings needs (pooling; an encoder's layer_norm, activation and
// non-causal attention too), else what it lacks (`tessera serve` passes over such a backend).
std::string missing_embedding_ops(ops::Device& device, bool encoder);
// What the model's layers ask of operators that `device` does not do, each as a phrase naming it ("mixture-of-
// experts layers (moe_route, moe_experts)", "attention sinks", an encoder's "encoder operators (layer_norm, ...)");
// empty: it runs every layer kind. ModelRunner::create
// refuses such a device with these; `--backend auto` passes it over.
std::vector<std::string> unsupported_layer_features(ops::Device& device, const model::ModelConfig& config);

// OK when `device` keeps a KV cache of `dtype` for this model (a block type needs head_dim a multiple of its block
// size: InvalidArgument; a backend without kernels for the type: Unimplemented naming it). ModelRunner::create asks.
Status check_kv_cache_type(ops::Device& device, const model::ModelConfig& config, DType dtype);

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
  // Bytes of weights held on the device: the stored sizes, plus any copy widened to f32 for a device that
  // cannot run a type (a tied table the device indexes in place is held once).
  size_t resident_weight_bytes() const { return resident_bytes_; }
  // Whether the last layer's feed-forward (and the final norm) runs only over the rows read after it (as llama.cpp
  // does): a prompt then pays for it, and for the classifier, once, for its last row. False for the models whose
  // layer end reads every row (keep_last_rows()).
  bool prunes_last_layer() const;
  // Compiled decode graphs so far (graph mode), by bucket.
  const std::map<int64_t, std::unique_ptr<ops::Graph>>& graphs() const { return graphs_; }

  // Appends each segment's tokens to its sequence in one forward pass. At most max_batch_tokens tokens and
  // segments in all; no sequence may appear twice. `logits` gets one row of vocab_size floats per segment
  // with want_logits, in segment order. On error no sequence's length changes (blocks reserved for the
  // step stay with their sequences and are reused by the next one).
  // `after_layer`, when given, runs once per layer right after that layer's K and V are in the cache (the
  // stream is synchronised first), which is how KV is saved (a prefill node streams it out) while later layers
  // compute. `before_layer`, when given, runs at the start of each layer, before anything of it is computed:
  // where KV loaded from outside (engine/kv_connector.h) must reach the cache before the layer's attention
  // reads it. Either hook makes the step run eagerly (never a graph replay).
  using LayerHook = std::function<Status(int layer)>;
  Status step(std::span<const Segment> segments, std::vector<float>& logits, const LayerHook& after_layer = nullptr,
              const LayerHook& before_layer = nullptr);
  // Calls fn(i) for every i in [0, n) on the host threads the device computes with (ops::Stream::for_each_on_host:
  // the cpu backend's operator threads, idle between steps), returning when all are done; between steps only.
  template <typename F>
  void for_each_on_host(int64_t n, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    stream_->for_each_on_host(
        n, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, &fn);
  }

  // Copies the K and V of positions [first, first + count) of `layer` out of the paged cache into two
  // row-major arrays [count][kv_dim] of `dtype` (f32 or f16), converting from the cache's type. Writes into the
  // cache (import_kv, step, decode) first hand the cache's pending evictions to its handler
  // (KvCache::flush_evictions). Unimplemented for a hybrid model's linear-attention layer (it has no K/V; see
  // export_state).
  Status export_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, void* k_out, void* v_out);
  // The reverse: writes those rows into seq's blocks (which must be reserved), converting to the cache's type.
  Status import_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, const void* k_in,
                   const void* v_in);

  // Hybrid models: the recurrent state `seq` carries after its cached positions (KvCache::state_bytes_per_slot()
  // bytes, f32: for each linear-attention layer in order, its convolution window [K - 1][channels] then its
  // delta-rule state [v_heads][S][S], state[h][j][i] pairing value j with key i), to or from a host array. With
  // export_kv / import_kv of the full-attention layers this is everything a sequence needs to continue elsewhere;
  // import needs the sequence's slot (KvCache::reserve from length 0 takes one). FailedPrecondition for a model
  // without state or a sequence without a slot.
  Status export_state(const SequenceKv& seq, void* out);
  Status import_state(const SequenceKv& seq, const void* in);

  // Appends `tokens` (any count; split into chunks internally) to `seq` and writes the logits of the last
  // one to `logits` (vocab_size floats). InvalidArgument past the model's context, ResourceExhausted when
  // KV blocks run out (seq is then unchanged).
  Status prefill(SequenceKv& seq, std::span<const TokenId> tokens, std::vector<float>& logits);

  // One token for each sequence; logits gets seqs.size() rows of vocab_size floats.
  Status decode(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens, std::vector<float>& logits);

  void release(SequenceKv& seq) { kv_->release(seq); }

 private:
  struct Layer {
    model::LayerKind kind;  // which feed-forward (and attention) this layer runs
    ops::Tensor attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    // kMoe feed-forward: the router [E, dim] (+ bias [E]) and the experts [E, ff, dim] / [E, dim, ff] (+ biases)
    ops::Tensor router, router_bias, experts_gate, experts_up, experts_down;
    ops::Tensor experts_gate_bias, experts_up_bias, experts_down_bias;
    ops::Tensor experts_gate_up;                // instead of experts_gate and experts_up when the file fuses them
    ops::Tensor bq, bk, bv, bo;                 // optional projection biases (Qwen2: q/k/v; gpt-oss: q/k/v/o)
    ops::Tensor sinks;                          // attention sinks [n_heads] (gpt-oss); invalid when the model has none
    ops::Tensor q_norm, k_norm;                 // qk_norm families (Qwen3, Gemma 3)
    ops::Tensor post_attn_norm, post_ffw_norm;  // post_norms families (Gemma)
    ops::Tensor rope_freqs;                     // scaled rotary: per-pair inverse frequencies (else invalid)
    float rope_theta = 10000.0f, rope_mscale = 1.0f;
    ops::AttentionScores scores;
    // kLinear attention (gated delta-net, model_runner_hybrid.cc): the input projections (q/k/v mixed, z, beta,
    // alpha), the convolution [C, K] (f32), dt bias and a [v_heads], the per-head output norm and projection.
    ops::Tensor w_qkv, w_z, w_beta, w_alpha, conv_w, dt_bias, ssm_a, ssm_norm, ssm_out;
    // Shared expert beside the routed ones (Qwen3.5-MoE): its MLP and its gate row [1, dim].
    ops::Tensor shexp_gate, shexp_up, shexp_down, shexp_gate_inp;
    // The layer's attention head size and MLP width (they differ between gemma4's layers); whether it writes K and V
    // (a gemma4 KV-sharing layer attends over its source layer's, model::ModelConfig::kv_source_layer).
    int64_t head_dim = 0, hidden = 0, n_kv_heads = 0;
    bool own_kv = true;
    // gemma4 (model_runner_gemma4.cc): the per-layer embedding's slice of the table [vocab, P] and of the model
    // projection [P, dim]; the gate [P, dim], projection [dim, P] and norm [dim] that add it after the MLP; the
    // output scale (1: none).
    ops::Tensor pl_table, pl_model_proj, pl_gate, pl_proj, pl_post_norm;
    float out_scale = 1.0f;
    // gemma4's experts beside its dense MLP (model::MoeConfig::dense_beside_experts): the router's input norm
    // (ffn_gate_inp.scale / sqrt(dim)), the experts' input norm (pre_ffw_norm_2), the branches' output norms
    // (post_ffw_norm_1: the MLP; post_ffw_norm_2: the experts) and each expert's output scale [E].
    ops::Tensor router_norm, experts_norm, mlp_post_norm, experts_post_norm, expert_scale;
  };
  // Activations, sized for max_batch_tokens rows.
  struct Scratch {
    ops::Tensor x, xb, delta, q, k, v, att, hb, hb2, logits;
    ops::Tensor ids, positions, slots, block_tables, context_lens;
    ops::Tensor window_slots, window_tables;                // a windowed cache's sliding layers: [n], [n, blocks]
    ops::Tensor router_logits, expert_ids, expert_weights;  // MoE layers: [n, E], [n, k], [n, k]
    ops::Tensor qg, gate;                                   // gated attention: [n, heads, 2 hd], [n, heads, hd]
    ops::Tensor mixed, conv_out, z, alpha, beta, lin;       // linear layers: [n, C] x2, [n, Vd], [n, Hv] x2, [n, Vd]
    ops::Tensor sh_hb, sh_hb2, sh_out, sh_gate;             // shared expert: [n, ff] x2, [n, dim], [n, 1]
    ops::Tensor ple, pl_hidden;                             // gemma4: [layers, n, P] (each layer's input), [n, P]
    ops::Tensor moe_out;                                    // gemma4's experts beside the MLP: [n, dim]
    ops::Tensor keep_rows;  // [n]: the rows the last layer's feed-forward computes (keep_last_rows())
  };

  ModelRunner(ops::Device& device, const model::ModelConfig& config, RunnerOptions options);
  Status upload_weights(const model::ModelWeights& weights);
  // export_kv (out) and import_kv: the rows of [first, first + count) between the paged cache and two
  // wire arrays [count][kv_dim] of `dtype`.
  Status copy_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, bool out, uint8_t* k, uint8_t* v);
  Status copy_state(const SequenceKv& seq, bool out, uint8_t* bytes);
  // kMatrix: a matmul weight; kExperts: the 3-D expert matrices of a MoE layer (both converted to
  // RunnerOptions::weight_dtype when set, and re-laid by the device); kTable: an embedding table other than
  // token_embd (gemma4's per-layer ones); kOther: norms, biases, the embedding.
  enum class WeightUse { kOther, kMatrix, kExperts, kTable };
  Result<ops::Tensor> upload(const model::ModelWeights& weights, const std::string& name, std::vector<int64_t> shape,
                             WeightUse use = WeightUse::kOther);
  // A weight matrix: uploaded in RunnerOptions::weight_dtype when that is set and possible.
  Result<ops::Tensor> upload_matrix(const model::ModelWeights& weights, const std::string& name,
                                    std::vector<int64_t> shape) {
    return upload(weights, name, std::move(shape), WeightUse::kMatrix);
  }
  // Layer l's feed-forward weights for its kind (dense MLP or mixture of experts).
  Status upload_ffn(const model::ModelWeights& weights, int l, Layer& layer);
  // The layer's dense gated MLP of n rows of `in` into `out`.
  Status run_mlp(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out);
  // The layer's feed-forward of n rows of `in` into `out`, by its kind.
  Status run_ffn(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out);
  // Hybrid models (model_runner_hybrid.cc): a linear layer's weights; the shared expert's; the activations both need.
  Status upload_linear(const model::ModelWeights& weights, int l, Layer& layer);
  Status upload_shared_expert(const model::ModelWeights& weights, int l, Layer& layer);
  Status alloc_hybrid_scratch();
  // out += sigmoid(in . gate_inp) * shared_expert(in), for n rows.
  Status run_shared_expert(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out);
  // gemma4 (model_runner_gemma4.cc): layer l's per-layer embedding weights and output scale; the activations and
  // the all-ones V norm weight; each layer's per-layer input from the scaled token embeddings in s_.x; and the end
  // of layer l (from the post-MLP norm in delta to the next layer's normed input in xb).
  Status upload_gemma4_layer(const model::ModelWeights& weights, int l, Layer& layer);
  Status alloc_gemma4_scratch();
  Status run_per_layer_inputs(int64_t n);
  Status run_gemma4_layer_end(const Layer& lw, int l, int64_t n, const ops::Tensor& next_norm);
  // gemma4 (26B-A4B): layer l's norms and scales around its experts; its feed-forward of n rows, the dense MLP of
  // `in` (ffn_norm of the residual stream s_.x) and the experts of the residual stream, added into `out`.
  Status upload_gemma4_experts(const model::ModelWeights& weights, int l, Layer& layer);
  Status run_gemma4_moe(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out);
  // Per-pair inverse frequencies of Qwen3.5's M-RoPE for text positions (empty without sections).
  std::vector<float> mrope_frequencies() const;
  // Like upload(), but an absent tensor yields an invalid (empty) Tensor instead of an error.
  Result<ops::Tensor> upload_optional(const model::ModelWeights& weights, const std::string& name,
                                      std::vector<int64_t> shape);
  Result<ops::Tensor> alloc(DType dtype, std::initializer_list<int64_t> shape);
  // The rotary tables of every layer (model/rope_scaling.h), uploaded once per distinct table.
  Status setup_rope(const model::ModelWeights& weights);
  // Gemma 2's and 4's final soft-capping of logit rows on the device, as llama.cpp builds it: scale by 1 / cap,
  // tanh, scale by cap (three operators over the rows, so a decode step's graph holds them too).
  Status cap_logits(const ops::Tensor& logits);
  // Layout of one step: decode segments (one token) first, in rows [0, decodes), then prefill segments.
  struct Placed {
    const Segment* segment;
    int64_t row0;   // first row in the batch
    int64_t table;  // row of block_tables
    int32_t start;  // position of the first token
  };
  // Layer l's linear attention of the step's rows (xb) into `out`: projections over all rows, then the convolution
  // and the delta rule per segment, each over its sequence's state slot (reset where the segment starts at 0).
  Status run_linear_attention(const Layer& lw, int l, int64_t n, std::span<const Placed> placed, const ops::Tensor& in,
                              const ops::Tensor& out);
  // Where linear layer `layer`'s state starts in export_state's layout.
  size_t state_offset(int layer) const;
  // RunnerOptions::deterministic for a causal model: every row of a step attends through the decode kernels.
  bool decode_every_row() const { return options_.deterministic && !encoder_; }
  // Runs the layers over n uploaded rows, attention per segment, then the classifier for wanted rows into
  // consecutive rows of s_.logits (decode segments first, then prefill segments in order).
  Status forward(int64_t n, std::span<const Placed> placed, int64_t decodes, const LayerHook& after_layer,
                 const LayerHook& before_layer = nullptr);
  // After forward(): the logits of every row of the segments that ask for them (Segment::all_logits).
  Status all_row_logits(std::span<const Placed> placed);
  Status run(const ops::Op& op);
  // RunnerOptions::activation_tap's point `name` of `layer`: `t`'s rows, downloaded (nothing when no tap is set).
  Status tap(std::string_view name, int layer, const ops::Tensor& t);
  // A windowed cache: seq's sliding-layer block table into `row` (a block out of the window as block 0).
  void fill_window_table(const SequenceKv& s, int32_t* row) const;

  ops::Device& device_;
  model::ModelConfig config_;
  RunnerOptions options_;
  int max_blocks_per_seq_ = 0;
  int64_t logit_rows_ = 0;  // rows of s_.logits (RunnerOptions::max_logit_rows, resolved)
  std::unique_ptr<ops::Stream> stream_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
  ops::Tensor token_embd_, output_norm_, classifier_;
  ops::Tensor pl_proj_norm_, ones_;     // gemma4: the per-layer projection's norm [P]; ones [max head size] (V's norm)
  std::vector<uint8_t> slice_scratch_;  // gemma4: a layer's columns of the per-layer table at load (freed after)
  std::vector<Layer> layers_;
  Scratch s_;
  std::unique_ptr<KvCache> kv_;
  Status decode_graph(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens, std::vector<float>& logits);
  int converted_ = 0, unconverted_ = 0;
  std::vector<ops::Op>* recording_ = nullptr;  // while recording a graph, run() also appends here
  std::map<int64_t, std::unique_ptr<ops::Graph>> graphs_;
  std::vector<ops::Buffer*> scratch_buffers_;  // the activations: what a graph's memory plan may move
  int32_t pad_block_ = -1;
  int32_t pad_window_block_ = -1;  // a windowed cache: the padding rows' block in the sliding layers' pool
  // step()'s host-side arrays, kept between steps so that a step does not allocate.
  std::vector<Placed> step_placed_;
  std::vector<int32_t> step_ids_, step_positions_, step_slots_, step_lens_, step_tables_, step_keep_;
  std::vector<int32_t> step_window_slots_, step_window_tables_;
  // The rows of a step whose final hidden state is read (decode rows, the last row of each prompt chunk that wants
  // logits), uploaded to s_.keep_rows; -1 when every row is (or must be) computed through the last layer.
  Result<int64_t> keep_last_rows(int64_t n, std::span<const Placed> placed, int64_t decodes);
  std::vector<float> step_rows_;
  std::vector<int64_t> step_row_of_;
  size_t streamed_bytes_ = 0;
  size_t resident_bytes_ = 0;

  // Encoders (bert, model/bert.h): their weights and forward pass (encoder_forward.cc); the KV cache then only
  // counts blocks for the scheduler (its tensors are minimal: an encoder reads its K and V from the step's rows).
  struct EncoderLayer {
    ops::Tensor wq, bq, wk, bk, wv, bv, wo, bo, attn_norm, attn_norm_b, w_up, b_up, w_down, b_down, out_norm,
        out_norm_b;
  };
  struct Encoder {
    ops::Tensor position_embd, type_embd, embd_norm, embd_norm_b, type_ids;
    std::vector<EncoderLayer> layers;
  };
  std::optional<Encoder> encoder_;
  ops::Tensor pooled_;  // [max_batch_tokens, dim]: the pooled vector of each segment that asks for one
  std::vector<float> pooled_rows_;
  Status upload_encoder_weights(const model::ModelWeights& weights);
  Status forward_encoder(int64_t n, std::span<const Placed> placed);
  // After forward(): each segment's pooled vector (Segment::pooled).
  Status pool_segments(std::span<const Placed> placed);
};

}  // namespace tessera::engine
