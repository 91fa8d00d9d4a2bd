// ModelRunner: creation, the forward of every layer kind, steps (prefill chunks and decode batches, eager or
// replayed as a graph) and logits. Weights and what of them the device runs: model_runner_weights.cc.
#include "engine/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/quant.h"
#include "model/rope_scaling.h"

namespace tessera::engine {

Status check_kv_cache_type(ops::Device& device, const model::ModelConfig& config, DType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  for (int hd : {config.head_dim, config.head_dim_sliding}) {
    if (info.block_elems > 1 && hd > 0 && hd % info.block_elems != 0) {
      return invalid_argument(fmt::format(
          "a {} KV cache stores each kv head's row as blocks of {} values, and this {} model's head_dim is {}: pick "
          "f16, bf16 or f32 for it (llama.cpp refuses such a cache too)",
          dtype_name(dtype), info.block_elems, config.arch, hd));
    }
  }
  // One query head over a one-block cache of the type, as decode runs it.
  const int64_t hd = config.head_dim;
  ops::Tensor cache(nullptr, 0, dtype, {1, 1, 1, hd});
  auto cb = device.alloc(cache.bytes());
  auto qb = device.alloc(static_cast<size_t>(hd) * 4);
  auto ob = device.alloc(static_cast<size_t>(hd) * 4);
  auto ib = device.alloc(8);
  if (!cb.ok() || !qb.ok() || !ob.ok() || !ib.ok()) return ok_status();  // the cache's own allocation will say why
  cache.buffer = cb->get();
  ops::Tensor q(qb->get(), 0, DType::kF32, {1, 1, hd}), o(ob->get(), 0, DType::kF32, {1, 1, hd});
  ops::Tensor table(ib->get(), 0, DType::kI32, {1, 1}), lens(ib->get(), 4, DType::kI32, {1});
  ops::Support s = device.supports(ops::AttentionDecodeOp{q, cache, cache, table, lens, o});
  // And one token's write of every kv head (a device may take a block type only in some row shapes).
  const int64_t kvh = std::max(1, config.n_kv_heads);
  ops::Tensor row_cache(nullptr, 0, dtype, {1, 1, kvh, hd});
  auto rb = device.alloc(row_cache.bytes());
  auto kb = device.alloc(static_cast<size_t>(kvh * hd) * 4);
  if (s.supported && rb.ok() && kb.ok()) {
    row_cache.buffer = rb->get();
    ops::Tensor k(kb->get(), 0, DType::kF32, {1, kvh, hd}), slot(ib->get(), 0, DType::kI32, {1});
    s = device.supports(ops::KvWriteOp{k, k, row_cache, row_cache, slot});
  }
  if (!s.supported) {
    return unimplemented(
        fmt::format("the {} backend does not keep a {} KV cache ({}): pick another KV cache type "
                    "(--cache-type-k / --kv-dtype) or the cpu or ref backend",
                    device.info().backend, dtype_name(dtype), s.reason));
  }
  return ok_status();
}

ModelRunner::ModelRunner(ops::Device& device, const model::ModelConfig& config, RunnerOptions options)
    : device_(device), config_(config), options_(options) {}

ModelRunner::~ModelRunner() = default;

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(ops::Device& device, const model::ModelConfig& config,
                                                         const model::ModelWeights& weights, RunnerOptions options) {
  TS_RETURN_IF_ERROR(config.validate());
  if (options.max_batch_tokens < 1 || options.max_sequences < 1) {
    return invalid_argument("max_batch_tokens and max_sequences must be positive");
  }
  if (options.max_logit_rows < 0) {
    return invalid_argument(
        fmt::format("max_logit_rows must be 0 (max_batch_tokens) or positive, got {}", options.max_logit_rows));
  }
  if (options.weight_dtype && (*options.weight_dtype == DType::kI32)) {
    return invalid_argument("weights can be converted to f32, f16, bf16, q8_0 or q4_0, not i32");
  }
  if (options.graph && !device.info().supports_graphs) {
    return invalid_argument(
        fmt::format("the {} backend cannot record graphs (supports_graphs is false): decode eagerly "
                    "(--graph off) or pick a backend that records (cpu, opencl, cuda)",
                    device.info().backend));
  }
  if (options.activation_tap) options.graph = false;  // a replayed graph has no points to stop at
  if (options.deterministic && config.causal && !device.info().batch_invariant) {
    return invalid_argument(fmt::format(
        "deterministic mode needs kernels that give a row the same bits in any batch; the {} backend's do not (or "
        "are not checked to): run it on cpu or ref, or without --deterministic",
        device.info().backend));
  }
  if (std::vector<std::string> missing = unsupported_layer_features(device, config); !missing.empty()) {
    return unimplemented(fmt::format("the {} backend does not run this {} model's {}: run it on cpu or ref",
                                     device.info().backend, config.arch, fmt::join(missing, " or ")));
  }
  if (config.causal) TS_RETURN_IF_ERROR(check_kv_cache_type(device, config, options.kv.dtype));
  if (config.has_linear_layers() && options.graph) {
    return invalid_argument(
        "graph decoding does not carry a hybrid model's recurrent state (linear-attention layers): decode eagerly "
        "(--graph off)");
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner(device, config, options));
  if (config.has_linear_layers()) {
    // One recurrent-state slot per sequence that may run; prefix reuse needs the state where a prefix ends, which
    // only state checkpoints keep (KvCacheOptions::state_checkpoints), so without them it is off.
    if (r->options_.kv.state_slots <= 0) r->options_.kv.state_slots = options.max_sequences;
    if (r->options_.kv.state_checkpoints <= 0) r->options_.kv.prefix_cache = false;
  }
  r->stream_ = device.create_stream();
  r->max_blocks_per_seq_ = (config.max_seq_len + options.kv.block_tokens - 1) / std::max(1, options.kv.block_tokens);
  if (r->options_.kv.num_blocks == 0) r->options_.kv.num_blocks = r->max_blocks_per_seq_ * options.max_sequences;
  if (r->options_.kv.window_kv && r->options_.kv.window_blocks == 0) {
    // Sliding layers that keep only their windows: enough for every sequence and a full step (0: no gain here).
    r->options_.kv.window_blocks =
        KvCache::window_pool_blocks(config, options.kv.block_tokens, options.max_sequences, options.max_batch_tokens);
    if (r->options_.kv.window_blocks == 0) r->options_.kv.window_kv = false;
  }
  if (options.graph) r->options_.kv.num_blocks += 1;                                 // the padding rows' block
  if (options.graph && r->options_.kv.window_kv) r->options_.kv.window_blocks += 1;  // and its window block
  TS_RETURN_IF_ERROR(config.causal ? r->upload_weights(weights) : r->upload_encoder_weights(weights));
  model::ModelConfig kv_config = config;
  if (!config.causal) {  // an encoder keeps no K/V between steps: its blocks are only counted
    kv_config.n_layers = 1;
    kv_config.n_kv_heads = 1;
    kv_config.head_dim = 2;
    r->options_.kv.dtype = DType::kF32;  // whatever type was asked for: these blocks hold nothing
  }
  TS_ASSIGN_OR_RETURN(r->kv_, KvCache::create(device, kv_config, r->options_.kv));
  if (options.graph) {
    TS_ASSIGN_OR_RETURN(BlockId pad, r->kv_->blocks().allocate());
    r->pad_block_ = static_cast<int32_t>(pad);
    if (r->kv_->windowed()) {
      TS_ASSIGN_OR_RETURN(BlockId wpad, r->kv_->window_pool().allocate());
      r->pad_window_block_ = static_cast<int32_t>(wpad);
    }
  }

  bool dense_layers = config.moe.dense_beside_experts && config.has_moe_layers();  // gemma4's MLP beside experts
  for (int l = 0; l < config.n_layers; ++l) dense_layers |= config.layer_kind(l).ffn == model::FfnKind::kDense;
  // Attention and MLP activations at the widest layer's size; each layer views them at its own.
  const int64_t n = options.max_batch_tokens, d = config.dim, h = dense_layers ? config.max_hidden_dim() : 1;
  const int64_t hd = config.max_head_dim();
  Scratch& s = r->s_;
  TS_ASSIGN_OR_RETURN(s.x, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.xb, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.delta, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.q, r->alloc(DType::kF32, {n, config.n_heads, hd}));
  TS_ASSIGN_OR_RETURN(s.k, r->alloc(DType::kF32, {n, config.n_kv_heads, hd}));  // n_kv_heads: the most of any layer
  TS_ASSIGN_OR_RETURN(s.v, r->alloc(DType::kF32, {n, config.n_kv_heads, hd}));
  TS_ASSIGN_OR_RETURN(s.att, r->alloc(DType::kF32, {n, config.n_heads, hd}));
  TS_ASSIGN_OR_RETURN(s.hb, r->alloc(DType::kF32, {n, h}));
  TS_ASSIGN_OR_RETURN(s.hb2, r->alloc(DType::kF32, {n, h}));
  r->logit_rows_ = n;
  if (options.max_logit_rows > 0) {
    int64_t rows = 1;  // a power of two: the graph path writes logits for its whole padded bucket
    while (rows < options.max_logit_rows) rows *= 2;
    r->logit_rows_ = std::min(n, rows);
  }
  TS_ASSIGN_OR_RETURN(s.logits, r->alloc(DType::kF32, {r->logit_rows_, config.vocab_size}));
  TS_ASSIGN_OR_RETURN(s.ids, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.positions, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.slots, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.block_tables, r->alloc(DType::kI32, {n, r->max_blocks_per_seq_}));
  if (r->kv_->windowed()) {  // the sliding layers' own tables and write slots
    TS_ASSIGN_OR_RETURN(s.window_slots, r->alloc(DType::kI32, {n}));
    TS_ASSIGN_OR_RETURN(s.window_tables, r->alloc(DType::kI32, {n, r->max_blocks_per_seq_}));
  }
  TS_ASSIGN_OR_RETURN(s.context_lens, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.keep_rows, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(r->pooled_, r->alloc(DType::kF32, {n, d}));
  if (r->encoder_) {  // every token of an encoder's input is of type 0 ("sentence A"), as llama.cpp computes it
    TS_ASSIGN_OR_RETURN(r->encoder_->type_ids, r->alloc(DType::kI32, {n}));
    const std::vector<int32_t> zeros(static_cast<size_t>(n), 0);
    TS_RETURN_IF_ERROR(r->stream_->upload(r->encoder_->type_ids, zeros.data()));
  }
  for (const ops::Tensor* t : {&s.x, &s.xb, &s.delta, &s.q, &s.k, &s.v, &s.att, &s.hb, &s.hb2, &s.logits}) {
    r->scratch_buffers_.push_back(t->buffer);
  }
  TS_RETURN_IF_ERROR(r->alloc_hybrid_scratch());
  TS_RETURN_IF_ERROR(r->alloc_gemma4_scratch());
  if (config.has_moe_layers()) {
    const int64_t experts = config.moe.n_experts, used = config.moe.n_experts_used;
    TS_ASSIGN_OR_RETURN(s.router_logits, r->alloc(DType::kF32, {n, experts}));
    TS_ASSIGN_OR_RETURN(s.expert_ids, r->alloc(DType::kI32, {n, used}));
    TS_ASSIGN_OR_RETURN(s.expert_weights, r->alloc(DType::kF32, {n, used}));
    for (const ops::Tensor* t : {&s.router_logits, &s.expert_ids, &s.expert_weights})
      r->scratch_buffers_.push_back(t->buffer);
  }
  return r;
}

Status ModelRunner::run_mlp(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out) {
  const ops::Activation act = config_.gelu_mlp ? ops::Activation::kGeluTanh : ops::Activation::kSilu;
  ops::Tensor hb(s_.hb.buffer, s_.hb.offset, DType::kF32, {n, lw.hidden});
  ops::Tensor hb2(s_.hb2.buffer, s_.hb2.offset, DType::kF32, {n, lw.hidden});
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_gate, hb}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_up, hb2}));
  TS_RETURN_IF_ERROR(run(ops::SiluMulOp{hb, hb2, hb, act}));
  return run(ops::MatMulOp{hb, lw.w_down, out});
}

Status ModelRunner::run_ffn(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out) {
  const model::ModelConfig& c = config_;
  if (lw.kind.ffn == model::FfnKind::kDense) return run_mlp(lw, n, in, out);
  if (c.moe.dense_beside_experts) return run_gemma4_moe(lw, n, in, out);
  const model::MoeConfig& m = c.moe;
  ops::Tensor logits = s_.router_logits.rows(0, n), ids = s_.expert_ids.rows(0, n),
              weights = s_.expert_weights.rows(0, n);
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.router, logits, lw.router_bias}));
  ops::MoeRouteOp route{logits, ids, weights};
  route.gating = m.gating == model::ExpertGating::kSoftmax   ? ops::MoeGating::kSoftmax
                 : m.gating == model::ExpertGating::kSigmoid ? ops::MoeGating::kSigmoid
                                                             : ops::MoeGating::kSoftmaxWeight;
  route.normalize = m.normalize_weights;
  route.scale = m.weights_scale;
  TS_RETURN_IF_ERROR(run(route));
  ops::MoeExpertsOp experts{in, ids, weights, lw.experts_gate, lw.experts_up, lw.experts_down, out};
  experts.gate_bias = lw.experts_gate_bias;
  experts.up_bias = lw.experts_up_bias;
  experts.down_bias = lw.experts_down_bias;
  experts.gate_up = lw.experts_gate_up;
  experts.act = c.gelu_mlp ? ops::Activation::kGeluTanh : ops::Activation::kSilu;
  if (m.swiglu_limit > 0.0f) {
    experts.act = ops::Activation::kSwigluOai;
    experts.alpha = 1.702f;  // llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constant (and gpt-oss's)
    experts.limit = m.swiglu_limit;
  }
  TS_RETURN_IF_ERROR(run(experts));
  if (lw.shexp_gate.valid()) return run_shared_expert(lw, n, in, out);
  return ok_status();
}

Status ModelRunner::cap_logits(const ops::Tensor& logits) {
  const float cap = config_.final_softcap;
  if (cap <= 0.0f || logits.dim(0) == 0) return ok_status();
  TS_RETURN_IF_ERROR(run(ops::ScaleOp{logits, logits, 1.0f / cap}));
  TS_RETURN_IF_ERROR(run(ops::ActivationOp{logits, logits, ops::Activation::kTanh}));
  return run(ops::ScaleOp{logits, logits, cap});
}

Status ModelRunner::tap(std::string_view name, int layer, const ops::Tensor& t) {
  if (!options_.activation_tap) return ok_status();
  std::vector<float> host(static_cast<size_t>(t.numel()));
  TS_RETURN_IF_ERROR(stream_->download(t, host.data()));
  TS_RETURN_IF_ERROR(stream_->synchronize());
  options_.activation_tap(name, layer, t.dim(0), host);
  return ok_status();
}

Status ModelRunner::run(const ops::Op& op) {
  if (recording_) recording_->push_back(op);
  return stream_->run(op);
}

bool ModelRunner::prunes_last_layer() const {
  return !options_.activation_tap && config_.per_layer_dim == 0 && !config_.layer_output_scale &&
         !config_.moe.dense_beside_experts;
}

Result<int64_t> ModelRunner::keep_last_rows(int64_t n, std::span<const Placed> placed, int64_t decodes) {
  // Every row is needed by a segment that wants all its logits or a pooled vector, by the activation taps (they
  // compare whole tensors), and by gemma4's layer end (per-layer inputs by row) and experts (both read the step's
  // buffers s_.x / s_.xb / s_.delta by name); a recording replays any rows.
  if (recording_ || !prunes_last_layer()) return -1;
  std::vector<int32_t>& keep = step_keep_;
  keep.clear();
  for (int64_t r = 0; r < decodes; ++r) keep.push_back(static_cast<int32_t>(r));
  for (const Placed& p : placed.subspan(static_cast<size_t>(decodes))) {
    if (p.segment->all_logits || p.segment->pooled) return -1;
    if (p.segment->want_logits)
      keep.push_back(static_cast<int32_t>(p.row0 + static_cast<int64_t>(p.segment->tokens.size()) - 1));
  }
  const auto kept = static_cast<int64_t>(keep.size());
  if (kept == n) return -1;
  if (kept > 0) TS_RETURN_IF_ERROR(stream_->upload(s_.keep_rows.rows(0, kept), keep.data()));
  return kept;
}

Status ModelRunner::forward(int64_t n, std::span<const Placed> placed, int64_t decodes, const LayerHook& after_layer,
                            const LayerHook& before_layer) {
  if (encoder_) return forward_encoder(n, placed);
  const model::ModelConfig& c = config_;
  ops::Tensor x = s_.x.rows(0, n), xb = s_.xb.rows(0, n), delta = s_.delta.rows(0, n);
  // As llama.cpp does: the last layer's feed-forward (and the final norm) runs only over the rows read after it.
  TS_ASSIGN_OR_RETURN(const int64_t kept, keep_last_rows(n, placed, decodes));
  bool pruned = false;
  ops::Tensor positions = s_.positions.rows(0, n);

  const float emb_scale = c.embedding_scale > 0.0f ? c.embedding_scale : 1.0f;
  TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{token_embd_, s_.ids.rows(0, n), x, emb_scale}));
  if (c.per_layer_dim > 0) TS_RETURN_IF_ERROR(run_per_layer_inputs(n));
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{x, layers_[0].attn_norm, xb, c.norm_eps}));
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& lw = layers_[static_cast<size_t>(l)];
    if (before_layer) TS_RETURN_IF_ERROR(before_layer(l));
    // The attention activations at this layer's head size (gemma4's layers differ; the buffers fit the widest).
    const int64_t hd = lw.head_dim, qd = c.n_heads * hd, kvh = lw.n_kv_heads, kvd = kvh * hd;
    const ops::Tensor q(s_.q.buffer, s_.q.offset, DType::kF32, {n, c.n_heads, hd});
    const ops::Tensor k(s_.k.buffer, s_.k.offset, DType::kF32, {n, kvh, hd});
    const ops::Tensor v(s_.v.buffer, s_.v.offset, DType::kF32, {n, kvh, hd});
    const ops::Tensor att(s_.att.buffer, s_.att.offset, DType::kF32, {n, c.n_heads, hd});
    const ops::Tensor q2 = q.reshaped({n, qd}), k2 = k.reshaped({n, kvd}), v2 = v.reshaped({n, kvd});
    const ops::Tensor att2 = att.reshaped({n, qd});
    TS_RETURN_IF_ERROR(tap("attn_norm", l, xb));
    if (lw.kind.attention == model::AttentionKind::kLinear) {
      TS_RETURN_IF_ERROR(run_linear_attention(lw, l, n, placed, xb, delta));
      if (after_layer) {
        TS_RETURN_IF_ERROR(stream_->synchronize());
        TS_RETURN_IF_ERROR(after_layer(l));
      }
    } else {
      ops::Tensor gate = c.attn_output_gate ? s_.gate.rows(0, n) : ops::Tensor();
      if (c.attn_output_gate) {  // each head's query, then its gate
        ops::Tensor qg = s_.qg.rows(0, n);
        TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wq, qg.reshaped({n, 2 * c.q_dim()}), lw.bq}));
        TS_RETURN_IF_ERROR(run(ops::SplitHeadsOp{qg, q, gate}));
      } else {
        TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wq, q2, lw.bq}));
      }
      // A gemma4 KV-sharing layer computes only its queries; its K and V are its source layer's, in the cache.
      if (lw.own_kv) {
        TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wk, k2, lw.bk}));
        TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wv, v2, lw.bv}));
      }
      if (c.qk_norm) {  // per head, in place: rows of head_dim
        ops::Tensor qh = q.reshaped({n * c.n_heads, hd}), kh = k.reshaped({n * kvh, hd});
        TS_RETURN_IF_ERROR(run(ops::RmsNormOp{qh, lw.q_norm, qh, c.norm_eps}));
        if (lw.own_kv) TS_RETURN_IF_ERROR(run(ops::RmsNormOp{kh, lw.k_norm, kh, c.norm_eps}));
      }
      if (c.v_norm && lw.own_kv) {  // gemma4: V RMS-normed per head with no weight (ones)
        ops::Tensor vh = v.reshaped({n * kvh, hd});
        TS_RETURN_IF_ERROR(run(ops::RmsNormOp{vh, ones_.rows(0, hd), vh, c.norm_eps}));
      }
      // (A sharing layer's k rows are stale scratch: the rotation turns them, nothing reads them.)
      TS_RETURN_IF_ERROR(
          run(ops::RopeOp{q, k, positions, lw.rope_theta, c.rope_layout, lw.rope_freqs, lw.rope_mscale, c.rope_dims}));
      TS_RETURN_IF_ERROR(tap("Qcur", l, q));
      TS_RETURN_IF_ERROR(tap("Kcur", l, k));
      TS_RETURN_IF_ERROR(tap("Vcur", l, v));
      // A windowed cache's sliding layers write and read their own pool's blocks, through their own tables.
      const bool windowed = kv_->windowed_layer(l);
      const ops::Tensor& slots = windowed ? s_.window_slots : s_.slots;
      const ops::Tensor& tables = windowed ? s_.window_tables : s_.block_tables;
      if (lw.own_kv) TS_RETURN_IF_ERROR(run(ops::KvWriteOp{k, v, kv_->k(l), kv_->v(l), slots.rows(0, n)}));
      // Deterministic mode: every row of the step as a decode (step() gave each its table row and length).
      const int64_t decode_rows = decode_every_row() ? n : decodes;
      if (decode_rows > 0) {
        TS_RETURN_IF_ERROR(run(ops::AttentionDecodeOp{q.rows(0, decode_rows), kv_->k(l), kv_->v(l),
                                                      tables.rows(0, decode_rows), s_.context_lens.rows(0, decode_rows),
                                                      att.rows(0, decode_rows), lw.scores, lw.sinks}));
      }
      for (size_t pi = static_cast<size_t>(decodes); pi < placed.size() && !decode_every_row(); ++pi) {
        const Placed& p = placed[pi];
        const auto len = static_cast<int64_t>(p.segment->tokens.size());
        ops::Tensor table = tables.rows(p.table, 1).reshaped({max_blocks_per_seq_});
        TS_RETURN_IF_ERROR(run(ops::AttentionPrefillOp{q.rows(p.row0, len), kv_->k(l), kv_->v(l), table,
                                                       att.rows(p.row0, len), p.start, lw.scores, lw.sinks}));
      }
      if (after_layer) {
        TS_RETURN_IF_ERROR(stream_->synchronize());
        TS_RETURN_IF_ERROR(after_layer(l));
      }
      if (c.attn_output_gate)
        TS_RETURN_IF_ERROR(run(ops::SiluMulOp{gate.reshaped({n, qd}), att2, att2, ops::Activation::kSigmoid}));
      TS_RETURN_IF_ERROR(tap("kqv_out", l, att2));
      TS_RETURN_IF_ERROR(run(ops::MatMulOp{att2, lw.wo, delta, lw.bo}));
    }
    if (c.post_norms) TS_RETURN_IF_ERROR(run(ops::RmsNormOp{delta, lw.post_attn_norm, delta, c.norm_eps}));
    TS_RETURN_IF_ERROR(run(ops::AddRmsNormOp{x, delta, lw.ffn_norm, xb, c.norm_eps}));
    if (l == c.n_layers - 1 && kept >= 0) {
      if (kept == 0) break;  // a prompt chunk that wants no logits: nothing reads past this point
      // The kept rows gathered (an exact copy): the residual into delta, the normed input into x.
      const ops::Tensor keep = s_.keep_rows.rows(0, kept);
      const ops::Tensor residual = s_.delta.rows(0, kept), in = s_.x.rows(0, kept);
      TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{x, keep, residual}));
      TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{xb, keep, in}));
      x = residual;
      xb = in;
      delta = s_.xb.rows(0, kept);
      n = kept;
      pruned = true;
    }
    TS_RETURN_IF_ERROR(tap("ffn_inp", l, x));
    TS_RETURN_IF_ERROR(tap("ffn_norm", l, xb));
    TS_RETURN_IF_ERROR(run_ffn(lw, n, xb, delta));
    if (c.post_norms) TS_RETURN_IF_ERROR(run(ops::RmsNormOp{delta, lw.post_ffw_norm, delta, c.norm_eps}));
    TS_RETURN_IF_ERROR(tap("ffn_out", l, delta));
    const ops::Tensor& next_norm = l + 1 < c.n_layers ? layers_[static_cast<size_t>(l) + 1].attn_norm : output_norm_;
    if (c.per_layer_dim > 0 || c.layer_output_scale) {
      TS_RETURN_IF_ERROR(run_gemma4_layer_end(lw, l, n, next_norm));
    } else {
      TS_RETURN_IF_ERROR(run(ops::AddRmsNormOp{x, delta, next_norm, xb, c.norm_eps}));
    }
    TS_RETURN_IF_ERROR(tap("l_out", l, x));
  }
  TS_RETURN_IF_ERROR(tap("result_norm", -1, xb));
  int64_t out_row = 0;
  if (decodes > 0) {
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb.rows(0, decodes), classifier_, s_.logits.rows(0, decodes)}));
    out_row = decodes;
  }
  for (size_t pi = static_cast<size_t>(decodes); pi < placed.size(); ++pi) {
    const Placed& p = placed[pi];
    if (!p.segment->want_logits) continue;
    // Pruned, the kept rows are in order: decode rows, then one per prompt chunk that wants logits.
    const int64_t last = pruned ? out_row : p.row0 + static_cast<int64_t>(p.segment->tokens.size()) - 1;
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb.rows(last, 1), classifier_, s_.logits.rows(out_row++, 1)}));
  }
  return cap_logits(s_.logits.rows(0, out_row));
}

Status ModelRunner::step(std::span<const Segment> segments, std::vector<float>& logits, const LayerHook& after_layer,
                         const LayerHook& before_layer) {
  if (segments.empty()) return invalid_argument("a step needs at least one segment");
  // Graph mode: a step made only of next tokens that each want logits (and no layer hook) is a decode step,
  // replayed from its bucket's recording; prefill chunks and mixed steps run eagerly.
  if (options_.graph && !after_layer && !before_layer &&
      std::all_of(segments.begin(), segments.end(), [](const Segment& seg) {
        return seg.seq != nullptr && seg.tokens.size() == 1 && seg.want_logits && !seg.all_logits;
      })) {
    std::vector<SequenceKv*> seqs;
    std::vector<TokenId> tokens;
    for (const Segment& seg : segments) {
      seqs.push_back(seg.seq);
      tokens.push_back(seg.tokens[0]);
    }
    return decode(seqs, tokens, logits);
  }
  int64_t n = 0;
  for (const Segment& seg : segments) {
    if (seg.seq == nullptr || seg.tokens.empty()) return invalid_argument("a segment needs a sequence and tokens");
    if (encoder_ && (seg.seq->length != 0 || seg.want_logits || seg.all_logits || !seg.pooled))
      return invalid_argument(
          "an encoder (non-causal) model computes each input whole in one segment from position 0, pooled, with no "
          "logits");
    n += static_cast<int64_t>(seg.tokens.size());
    const int64_t end = static_cast<int64_t>(seg.seq->length) + static_cast<int64_t>(seg.tokens.size());
    if (end > config_.max_seq_len) {
      return invalid_argument(fmt::format("{} positions exceed the model's context of {}", end, config_.max_seq_len));
    }
  }
  // The classifier runs over every decode row and the last row of each prompt chunk that wants logits.
  const auto logit_rows = std::count_if(segments.begin(), segments.end(),
                                        [](const Segment& seg) { return seg.tokens.size() == 1 || seg.want_logits; });
  if (logit_rows > logit_rows_) {
    return invalid_argument(
        fmt::format("a step sampling {} sequences exceeds the runner's {} logit rows (RunnerOptions::max_logit_rows)",
                    logit_rows, logit_rows_));
  }
  if (n > options_.max_batch_tokens || static_cast<int64_t>(segments.size()) > options_.max_batch_tokens) {
    return invalid_argument(fmt::format("a step of {} tokens in {} segments exceeds max_batch_tokens {}", n,
                                        segments.size(), options_.max_batch_tokens));
  }
  for (const Segment& seg : segments) {
    TS_RETURN_IF_ERROR(kv_->reserve(*seg.seq, seg.seq->length + static_cast<int32_t>(seg.tokens.size())));
    for (int i = 0, last = seg.seq->length; i < seg.num_states; ++i) {
      const Segment::StateOut& st = seg.states[static_cast<size_t>(i)];
      if (st.out == nullptr || st.position <= last ||
          st.position > seg.seq->length + static_cast<int32_t>(seg.tokens.size()) || !kv_->has_state())
        return invalid_argument(fmt::format(
            "state checkpoint {} at position {}: not a hybrid model's, or not in order inside the segment ({}, {}]", i,
            st.position, seg.seq->length, seg.seq->length + seg.tokens.size()));
      last = st.position;
    }
    // A prefix hit of a hybrid model goes on from the state checkpoint taken where the prefix ends.
    if (const uint8_t* state = kv_->pending_restore(*seg.seq); state != nullptr) {
      TS_RETURN_IF_ERROR(import_state(*seg.seq, state));
      kv_->restored(*seg.seq);
    }
  }
  kv_->flush_evictions();  // blocks this step overwrites may hold cached KV a connector keeps

  // Decode segments first so their rows are contiguous for one batched attention call.
  // The host-side arrays of a step are members, reused: a serving step allocates nothing here.
  std::vector<Placed>& placed = step_placed_;
  placed.clear();
  for (const Segment& seg : segments) {
    if (seg.tokens.size() == 1) placed.push_back({&seg, 0, 0, seg.seq->length});
  }
  const auto decodes = static_cast<int64_t>(placed.size());
  for (const Segment& seg : segments) {
    if (seg.tokens.size() != 1) placed.push_back({&seg, 0, 0, seg.seq->length});
  }
  const int bt = kv_->block_tokens();
  const auto max_blocks = static_cast<size_t>(max_blocks_per_seq_);
  std::vector<int32_t>&ids = step_ids_, &positions = step_positions_, &slots = step_slots_, &lens = step_lens_;
  std::vector<int32_t>& tables = step_tables_;
  std::vector<int32_t>&window_slots = step_window_slots_, &window_tables = step_window_tables_;
  const bool windowed = kv_->windowed();
  ids.clear();
  positions.clear();
  slots.clear();
  lens.clear();
  window_slots.clear();
  // Deterministic mode (RunnerOptions::deterministic): every row attends as a decode, with a table row and a context
  // length of its own; otherwise one table row per placed segment and lengths for the decode rows.
  const bool row_tables = decode_every_row();
  const auto table_rows = static_cast<int64_t>(row_tables ? static_cast<size_t>(n) : placed.size());
  tables.assign(static_cast<size_t>(table_rows) * max_blocks, 0);
  // A window block that has left the window reads as block 0: no kernel reads positions outside a query's window.
  if (windowed) window_tables.assign(static_cast<size_t>(table_rows) * max_blocks, 0);
  int64_t row = 0;
  for (size_t i = 0; i < placed.size(); ++i) {
    Placed& p = placed[i];
    const SequenceKv& s = *p.segment->seq;
    p.row0 = row;
    p.table = row_tables ? row : static_cast<int64_t>(i);
    const size_t copies = row_tables ? p.segment->tokens.size() : 1;
    for (size_t t = 0; t < copies; ++t) {
      const auto at = static_cast<size_t>(p.table) + t;
      std::transform(s.blocks.begin(), s.blocks.end(), tables.begin() + static_cast<std::ptrdiff_t>(at * max_blocks),
                     [](BlockId b) { return static_cast<int32_t>(b); });
      if (windowed) fill_window_table(s, window_tables.data() + at * max_blocks);
    }
    for (size_t t = 0; t < p.segment->tokens.size(); ++t) {
      const int32_t pos = p.start + static_cast<int32_t>(t);
      ids.push_back(p.segment->tokens[t]);
      positions.push_back(pos);
      slots.push_back(static_cast<int32_t>(s.blocks[static_cast<size_t>(pos / bt)]) * bt + pos % bt);
      if (windowed)
        window_slots.push_back(static_cast<int32_t>(s.window_blocks[static_cast<size_t>(pos / bt)]) * bt + pos % bt);
      if (row_tables || static_cast<int64_t>(i) < decodes) lens.push_back(pos + 1);
    }
    row += static_cast<int64_t>(p.segment->tokens.size());
  }
  TS_RETURN_IF_ERROR(stream_->upload(s_.ids.rows(0, n), ids.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.positions.rows(0, n), positions.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.slots.rows(0, n), slots.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.block_tables.rows(0, table_rows), tables.data()));
  if (windowed) {
    TS_RETURN_IF_ERROR(stream_->upload(s_.window_slots.rows(0, n), window_slots.data()));
    TS_RETURN_IF_ERROR(stream_->upload(s_.window_tables.rows(0, table_rows), window_tables.data()));
  }
  const auto len_rows = static_cast<int64_t>(lens.size());
  if (len_rows > 0) TS_RETURN_IF_ERROR(stream_->upload(s_.context_lens.rows(0, len_rows), lens.data()));
  TS_RETURN_IF_ERROR(forward(n, placed, decodes, after_layer, before_layer));
  TS_RETURN_IF_ERROR(pool_segments(placed));

  // Logit rows come out decode-first; hand them back in segment order.
  int64_t wanted = encoder_ ? 0 : decodes;  // an encoder has no classifier
  for (const Placed& p : std::span(placed).subspan(static_cast<size_t>(decodes)))
    wanted += p.segment->want_logits ? 1 : 0;
  const auto vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float>& rows = step_rows_;
  rows.resize(static_cast<size_t>(wanted) * vocab);
  if (wanted > 0) TS_RETURN_IF_ERROR(stream_->download(s_.logits.rows(0, wanted), rows.data()));
  TS_RETURN_IF_ERROR(stream_->synchronize());
  std::vector<int64_t>& row_of = step_row_of_;
  row_of.assign(segments.size(), -1);
  int64_t next_prefill_row = decodes;
  for (size_t i = 0; i < placed.size(); ++i) {
    const auto seg_index = static_cast<size_t>(placed[i].segment - segments.data());
    if (static_cast<int64_t>(i) < decodes) {
      row_of[seg_index] = static_cast<int64_t>(i);
    } else if (placed[i].segment->want_logits) {
      row_of[seg_index] = next_prefill_row++;
    }
  }
  logits.clear();
  for (size_t i = 0; i < segments.size(); ++i) {
    if (row_of[i] < 0 || !segments[i].want_logits) continue;
    auto first = rows.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(row_of[i]) * vocab);
    logits.insert(logits.end(), first, first + static_cast<std::ptrdiff_t>(vocab));
  }
  TS_RETURN_IF_ERROR(all_row_logits(placed));
  for (const Segment& seg : segments) seg.seq->length += static_cast<int32_t>(seg.tokens.size());
  return ok_status();
}

void ModelRunner::fill_window_table(const SequenceKv& s, int32_t* row) const {
  for (size_t i = 0; i < s.window_blocks.size(); ++i)
    row[i] = s.window_blocks[i] == kNoBlock ? 0 : static_cast<int32_t>(s.window_blocks[i]);
}

Status ModelRunner::all_row_logits(std::span<const Placed> placed) {
  // The wanted rows are on the host now, so the logits buffer is free: the classifier runs again over each
  // segment that wants every row, logit_rows_ rows at a time, from the final hidden states still in xb.
  const auto vocab = static_cast<size_t>(config_.vocab_size);
  for (const Placed& p : placed) {
    if (!p.segment->all_logits) continue;
    const auto count = static_cast<int64_t>(p.segment->tokens.size());
    for (int64_t at = 0; at < count; at += logit_rows_) {
      const int64_t k = std::min(logit_rows_, count - at);
      TS_RETURN_IF_ERROR(run(ops::MatMulOp{s_.xb.rows(p.row0 + at, k), classifier_, s_.logits.rows(0, k)}));
      TS_RETURN_IF_ERROR(cap_logits(s_.logits.rows(0, k)));
      step_rows_.resize(static_cast<size_t>(k) * vocab);
      TS_RETURN_IF_ERROR(stream_->download(s_.logits.rows(0, k), step_rows_.data()));
      TS_RETURN_IF_ERROR(stream_->synchronize());
      p.segment->all_logits(static_cast<int>(at), step_rows_);
    }
  }
  return ok_status();
}

Status ModelRunner::prefill(SequenceKv& seq, std::span<const TokenId> tokens, std::vector<float>& logits) {
  if (tokens.empty()) return invalid_argument("prefill needs at least one token");
  const int64_t end = static_cast<int64_t>(seq.length) + static_cast<int64_t>(tokens.size());
  if (end > config_.max_seq_len) {
    return invalid_argument(fmt::format("{} positions exceed the model's context of {}", end, config_.max_seq_len));
  }
  const int32_t old_length = seq.length;
  const auto chunk = static_cast<size_t>(options_.max_batch_tokens);
  if (kv_->windowed()) {
    // The sliding layers hold one chunk and the window before it at a time, never the whole prompt: their blocks are
    // taken chunk by chunk. Nothing else allocates meanwhile, so room for the most one chunk holds, counted here,
    // means no chunk fails for want of one (and the sequence is unchanged on this error).
    const int bt = kv_->block_tokens();
    const int64_t span = kv_->window() - 1 + static_cast<int64_t>(std::min(chunk, tokens.size()));
    const int64_t to_end = (end + bt - 1) / bt - std::max(0, seq.length - kv_->window() + 1) / bt;
    const auto peak = static_cast<int>(std::min((span + bt - 1) / bt + 1, to_end));
    const int room = kv_->window_pool().available() + KvCache::window_blocks_held(seq);
    if (room < peak) {
      return resource_exhausted(fmt::format(
          "the sliding layers' window blocks: {} free or held, a prompt chunk with its window needs up to {}", room,
          peak));
    }
  }
  TS_RETURN_IF_ERROR(kv_->reserve(seq, static_cast<int32_t>(end), kv_->windowed() ? seq.length : -1));
  for (size_t done = 0; done < tokens.size(); done += chunk) {
    const size_t n = std::min(chunk, tokens.size() - done);
    Segment seg{&seq, tokens.subspan(done, n), done + n == tokens.size()};
    Status st = step(std::span(&seg, 1), logits);
    if (!st.ok()) {
      seq.length = old_length;
      return st;
    }
  }
  return ok_status();
}

Status ModelRunner::decode(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens,
                           std::vector<float>& logits) {
  if (seqs.size() != tokens.size() || seqs.empty()) return invalid_argument("decode needs one token per sequence");
  if (options_.graph) {
    if (seqs.size() > static_cast<size_t>(options_.max_batch_tokens)) {
      return invalid_argument(
          fmt::format("decode batch of {} exceeds max_batch_tokens {}", seqs.size(), options_.max_batch_tokens));
    }
    if (static_cast<int64_t>(seqs.size()) > logit_rows_) {
      return invalid_argument(fmt::format("decode batch of {} exceeds the runner's {} logit rows (max_logit_rows)",
                                          seqs.size(), logit_rows_));
    }
    for (SequenceKv* s : seqs) {
      if (s->length + 1 > config_.max_seq_len) {
        return invalid_argument(fmt::format("a sequence would exceed the model's context of {}", config_.max_seq_len));
      }
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      Status st = kv_->reserve(*seqs[i], seqs[i]->length + 1);
      if (!st.ok()) return st;  // sequences reserved so far keep their (unused) block: harmless, reused next step
    }
    kv_->flush_evictions();
    return decode_graph(seqs, tokens, logits);
  }
  std::vector<Segment> segments;
  segments.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) segments.push_back({seqs[i], tokens.subspan(i, 1), true});
  return step(segments, logits);
}

Status ModelRunner::decode_graph(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens,
                                 std::vector<float>& logits) {
  const size_t b = seqs.size();
  int64_t bucket = 1;
  while (bucket < static_cast<int64_t>(b)) bucket *= 2;
  bucket = std::min<int64_t>(bucket, options_.max_batch_tokens);
  const auto rows = static_cast<size_t>(bucket);
  const int bt = kv_->block_tokens();
  // Padding rows: token 0 at position 0 of the reserved block, attending to itself only.
  std::vector<int32_t> ids(rows, 0), positions(rows, 0), slots(rows, pad_block_ * bt), lens(rows, 1);
  std::vector<int32_t> tables(rows * static_cast<size_t>(max_blocks_per_seq_), 0);
  for (size_t i = b; i < rows; ++i) tables[i * static_cast<size_t>(max_blocks_per_seq_)] = pad_block_;
  const bool windowed = kv_->windowed();
  std::vector<int32_t> window_slots, window_tables;
  if (windowed) {
    window_slots.assign(rows, pad_window_block_ * bt);
    window_tables.assign(tables.size(), 0);
    for (size_t i = b; i < rows; ++i) window_tables[i * static_cast<size_t>(max_blocks_per_seq_)] = pad_window_block_;
  }
  for (size_t i = 0; i < b; ++i) {
    const SequenceKv& s = *seqs[i];
    ids[i] = tokens[i];
    positions[i] = s.length;
    slots[i] = static_cast<int32_t>(s.blocks[static_cast<size_t>(s.length / bt)]) * bt + s.length % bt;
    lens[i] = s.length + 1;
    std::transform(s.blocks.begin(), s.blocks.end(),
                   tables.begin() + static_cast<std::ptrdiff_t>(i) * max_blocks_per_seq_,
                   [](BlockId b) { return static_cast<int32_t>(b); });
    if (windowed) {
      window_slots[i] = static_cast<int32_t>(s.window_blocks[static_cast<size_t>(s.length / bt)]) * bt + s.length % bt;
      fill_window_table(s, window_tables.data() + i * static_cast<size_t>(max_blocks_per_seq_));
    }
  }
  TS_RETURN_IF_ERROR(stream_->upload(s_.ids.rows(0, bucket), ids.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.positions.rows(0, bucket), positions.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.slots.rows(0, bucket), slots.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.context_lens.rows(0, bucket), lens.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.block_tables.rows(0, bucket), tables.data()));
  if (windowed) {
    TS_RETURN_IF_ERROR(stream_->upload(s_.window_slots.rows(0, bucket), window_slots.data()));
    TS_RETURN_IF_ERROR(stream_->upload(s_.window_tables.rows(0, bucket), window_tables.data()));
  }
  ops::Tensor out = s_.logits.rows(0, static_cast<int64_t>(b));
  auto it = graphs_.find(bucket);
  if (it == graphs_.end()) {
    // Record this step while running it eagerly, then compile it for the next steps of this bucket.
    std::vector<ops::Op> recorded;
    recording_ = &recorded;
    Status st = forward(bucket, {}, bucket, nullptr);
    recording_ = nullptr;
    TS_RETURN_IF_ERROR(st);
    TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Graph> g, ops::compile(recorded, scratch_buffers_, device_));
    graphs_.emplace(bucket, std::move(g));
  } else {
    TS_RETURN_IF_ERROR(it->second->replay(*stream_));
    out = it->second->remap(out);
  }
  for (SequenceKv* s : seqs) s->length += 1;
  logits.resize(b * static_cast<size_t>(config_.vocab_size));
  TS_RETURN_IF_ERROR(stream_->download(out, logits.data()));
  return stream_->synchronize();
}

}  // namespace tessera::engine
