#include "engine/model_runner.h"

#include <algorithm>

#include <fmt/core.h>

#include "base/quant.h"

namespace tessera::engine {
namespace {

// Whether `device` runs weights of type `dtype` with rows of `cols` elements as they are stored: as a matmul
// weight and, for the token embedding, as an embedding table. supports() validates its operands' buffers, so
// the probe uses tiny real ones (one row).
bool device_runs_weight(ops::Device& device, DType dtype, int64_t cols, int rank, bool is_embedding) {
  if (dtype == DType::kF32) return true;
  if (rank != 2) return false;  // norms and biases are f32 operands of every operator
  auto wb = device.alloc(dtype_bytes(dtype, static_cast<size_t>(cols)));
  auto xb = device.alloc(static_cast<size_t>(cols) * 4);
  auto ob = device.alloc(4);
  auto ib = device.alloc(4);
  if (!wb.ok() || !xb.ok() || !ob.ok() || !ib.ok()) return false;
  ops::Tensor w(wb->get(), 0, dtype, {1, cols});
  ops::Tensor x(xb->get(), 0, DType::kF32, {1, cols});
  ops::Tensor out(ob->get(), 0, DType::kF32, {1, 1});
  if (!device.supports(ops::MatMulOp{x, w, out}).supported) return false;
  if (!is_embedding) return true;
  ops::Tensor ids(ib->get(), 0, DType::kI32, {1});
  return device.supports(ops::EmbeddingOp{w, ids, x}).supported;
}

}  // namespace

ModelRunner::ModelRunner(ops::Device& device, const model::ModelConfig& config, RunnerOptions options)
    : device_(device), config_(config), options_(options) {}

ModelRunner::~ModelRunner() = default;

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(ops::Device& device, const model::ModelConfig& config,
                                                         const model::ModelWeights& weights, RunnerOptions options) {
  TS_RETURN_IF_ERROR(config.validate());
  if (options.max_batch_tokens < 1 || options.max_sequences < 1) {
    return invalid_argument("max_batch_tokens and max_sequences must be positive");
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner(device, config, options));
  r->stream_ = device.create_stream();
  r->max_blocks_per_seq_ = (config.max_seq_len + options.kv.block_tokens - 1) / std::max(1, options.kv.block_tokens);
  if (r->options_.kv.num_blocks == 0) r->options_.kv.num_blocks = r->max_blocks_per_seq_ * options.max_sequences;
  TS_RETURN_IF_ERROR(r->upload_weights(weights));
  TS_ASSIGN_OR_RETURN(r->kv_, KvCache::create(device, config, r->options_.kv));

  const int64_t n = options.max_batch_tokens, d = config.dim, h = config.hidden_dim;
  Scratch& s = r->s_;
  TS_ASSIGN_OR_RETURN(s.x, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.xb, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.delta, r->alloc(DType::kF32, {n, d}));
  TS_ASSIGN_OR_RETURN(s.q, r->alloc(DType::kF32, {n, config.n_heads, config.head_dim}));
  TS_ASSIGN_OR_RETURN(s.k, r->alloc(DType::kF32, {n, config.n_kv_heads, config.head_dim}));
  TS_ASSIGN_OR_RETURN(s.v, r->alloc(DType::kF32, {n, config.n_kv_heads, config.head_dim}));
  TS_ASSIGN_OR_RETURN(s.att, r->alloc(DType::kF32, {n, config.n_heads, config.head_dim}));
  TS_ASSIGN_OR_RETURN(s.hb, r->alloc(DType::kF32, {n, h}));
  TS_ASSIGN_OR_RETURN(s.hb2, r->alloc(DType::kF32, {n, h}));
  TS_ASSIGN_OR_RETURN(s.logits, r->alloc(DType::kF32, {n, config.vocab_size}));
  TS_ASSIGN_OR_RETURN(s.ids, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.positions, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.slots, r->alloc(DType::kI32, {n}));
  TS_ASSIGN_OR_RETURN(s.block_table, r->alloc(DType::kI32, {r->max_blocks_per_seq_}));
  TS_ASSIGN_OR_RETURN(s.block_tables, r->alloc(DType::kI32, {n, r->max_blocks_per_seq_}));
  TS_ASSIGN_OR_RETURN(s.context_lens, r->alloc(DType::kI32, {n}));
  return r;
}

Result<ops::Tensor> ModelRunner::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  ops::Tensor t(nullptr, 0, dtype, shape);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device_.alloc(t.bytes()));
  t.buffer = buf.get();
  buffers_.push_back(std::move(buf));
  return t;
}

Result<ops::Tensor> ModelRunner::upload(const model::ModelWeights& weights, const std::string& name,
                                        std::vector<int64_t> shape) {
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* w, weights.require(name, shape));
  ops::Tensor t(nullptr, 0, w->dtype, {});
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.dims.begin());
  if (t.bytes() != w->bytes)
    return internal_error(fmt::format("tensor {} holds {} bytes, expected {}", name, w->bytes, t.bytes()));
  const void* src = w->data;
  std::vector<float> widened;
  if (!device_runs_weight(device_, t.dtype, t.dim(t.rank - 1), t.rank, name == "token_embd.weight")) {
    // The device cannot run this weight type: widen it to f32 on the host, so that an f16/bf16/q8_0/q4_0
    // model from a GGUF or safetensors file still runs (at f32's memory cost).
    widened.resize(static_cast<size_t>(t.numel()));
    TS_RETURN_IF_ERROR(dequantize(w->data, w->dtype, widened));
    t.dtype = DType::kF32;
    src = widened.data();
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device_.alloc(t.bytes()));
  t.buffer = buf.get();
  buffers_.push_back(std::move(buf));
  TS_RETURN_IF_ERROR(stream_->upload(t, src));
  if (!widened.empty()) TS_RETURN_IF_ERROR(stream_->synchronize());  // `widened` is freed on return
  return t;
}

Result<ops::Tensor> ModelRunner::upload_optional(const model::ModelWeights& weights, const std::string& name,
                                                 std::vector<int64_t> shape) {
  if (weights.find(name) == nullptr) return ops::Tensor();
  return upload(weights, name, std::move(shape));
}

Status ModelRunner::upload_weights(const model::ModelWeights& weights) {
  const int64_t d = config_.dim, h = config_.hidden_dim, q = config_.q_dim(), kv = config_.kv_dim();
  TS_ASSIGN_OR_RETURN(token_embd_, upload(weights, "token_embd.weight", {config_.vocab_size, d}));
  TS_ASSIGN_OR_RETURN(output_norm_, upload(weights, "output_norm.weight", {d}));
  if (config_.tied_embeddings) {
    classifier_ = token_embd_;
  } else {
    TS_ASSIGN_OR_RETURN(classifier_, upload(weights, "output.weight", {config_.vocab_size, d}));
  }
  for (int l = 0; l < config_.n_layers; ++l) {
    auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
    Layer layer;
    TS_ASSIGN_OR_RETURN(layer.attn_norm, upload(weights, name("attn_norm.weight"), {d}));
    TS_ASSIGN_OR_RETURN(layer.wq, upload(weights, name("attn_q.weight"), {q, d}));
    TS_ASSIGN_OR_RETURN(layer.wk, upload(weights, name("attn_k.weight"), {kv, d}));
    TS_ASSIGN_OR_RETURN(layer.wv, upload(weights, name("attn_v.weight"), {kv, d}));
    TS_ASSIGN_OR_RETURN(layer.bq, upload_optional(weights, name("attn_q.bias"), {q}));
    TS_ASSIGN_OR_RETURN(layer.bk, upload_optional(weights, name("attn_k.bias"), {kv}));
    TS_ASSIGN_OR_RETURN(layer.bv, upload_optional(weights, name("attn_v.bias"), {kv}));
    TS_ASSIGN_OR_RETURN(layer.wo, upload(weights, name("attn_output.weight"), {d, q}));
    TS_ASSIGN_OR_RETURN(layer.ffn_norm, upload(weights, name("ffn_norm.weight"), {d}));
    TS_ASSIGN_OR_RETURN(layer.w_gate, upload(weights, name("ffn_gate.weight"), {h, d}));
    TS_ASSIGN_OR_RETURN(layer.w_up, upload(weights, name("ffn_up.weight"), {h, d}));
    TS_ASSIGN_OR_RETURN(layer.w_down, upload(weights, name("ffn_down.weight"), {d, h}));
    layers_.push_back(layer);
  }
  return stream_->synchronize();
}

Status ModelRunner::run(const ops::Op& op) { return stream_->run(op); }

Status ModelRunner::forward(int64_t n, Mode mode, int32_t prefill_start, int64_t logit_row0) {
  const model::ModelConfig& c = config_;
  ops::Tensor x = s_.x.rows(0, n), xb = s_.xb.rows(0, n), delta = s_.delta.rows(0, n);
  ops::Tensor q = s_.q.rows(0, n), k = s_.k.rows(0, n), v = s_.v.rows(0, n), att = s_.att.rows(0, n);
  ops::Tensor hb = s_.hb.rows(0, n), hb2 = s_.hb2.rows(0, n);
  ops::Tensor q2 = q.reshaped({n, c.q_dim()}), k2 = k.reshaped({n, c.kv_dim()}), v2 = v.reshaped({n, c.kv_dim()});
  ops::Tensor att2 = att.reshaped({n, c.q_dim()});
  ops::Tensor positions = s_.positions.rows(0, n);

  TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{token_embd_, s_.ids.rows(0, n), x}));
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{x, layers_[0].attn_norm, xb, c.norm_eps}));
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& lw = layers_[static_cast<size_t>(l)];
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wq, q2, lw.bq}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wk, k2, lw.bk}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.wv, v2, lw.bv}));
    TS_RETURN_IF_ERROR(run(ops::RopeOp{q, k, positions, c.rope_theta, c.rope_layout}));
    TS_RETURN_IF_ERROR(run(ops::KvWriteOp{k, v, kv_->k(l), kv_->v(l), s_.slots.rows(0, n)}));
    if (mode == Mode::kPrefill) {
      TS_RETURN_IF_ERROR(run(ops::AttentionPrefillOp{q, kv_->k(l), kv_->v(l), s_.block_table, att, prefill_start}));
    } else {
      TS_RETURN_IF_ERROR(run(ops::AttentionDecodeOp{q, kv_->k(l), kv_->v(l), s_.block_tables.rows(0, n),
                                                    s_.context_lens.rows(0, n), att}));
    }
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{att2, lw.wo, delta}));
    TS_RETURN_IF_ERROR(run(ops::AddRmsNormOp{x, delta, lw.ffn_norm, xb, c.norm_eps}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.w_gate, hb}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{xb, lw.w_up, hb2}));
    TS_RETURN_IF_ERROR(run(ops::SiluMulOp{hb, hb2, hb}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{hb, lw.w_down, delta}));
    const ops::Tensor& next_norm = l + 1 < c.n_layers ? layers_[static_cast<size_t>(l) + 1].attn_norm : output_norm_;
    TS_RETURN_IF_ERROR(run(ops::AddRmsNormOp{x, delta, next_norm, xb, c.norm_eps}));
  }
  const int64_t rows = n - logit_row0;
  return run(ops::MatMulOp{xb.rows(logit_row0, rows), classifier_, s_.logits.rows(0, rows)});
}

Status ModelRunner::prefill(SequenceKv& seq, std::span<const TokenId> tokens, std::vector<float>& logits) {
  if (tokens.empty()) return invalid_argument("prefill needs at least one token");
  const int64_t end = static_cast<int64_t>(seq.length) + static_cast<int64_t>(tokens.size());
  if (end > config_.max_seq_len) {
    return invalid_argument(fmt::format("{} positions exceed the model's context of {}", end, config_.max_seq_len));
  }
  const int32_t old_length = seq.length;
  TS_RETURN_IF_ERROR(kv_->reserve(seq, static_cast<int32_t>(end)));
  std::vector<int32_t> positions, slots;
  std::vector<int32_t> table(static_cast<size_t>(max_blocks_per_seq_), 0);
  std::copy(seq.blocks.begin(), seq.blocks.end(), table.begin());
  TS_RETURN_IF_ERROR(stream_->upload(s_.block_table, table.data()));
  const int bt = kv_->block_tokens();
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(options_.max_batch_tokens));
    positions.resize(n);
    slots.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int32_t pos = seq.length + static_cast<int32_t>(i);
      positions[i] = pos;
      slots[i] = seq.blocks[static_cast<size_t>(pos / bt)] * bt + pos % bt;
    }
    const auto rows = static_cast<int64_t>(n);
    TS_RETURN_IF_ERROR(stream_->upload(s_.ids.rows(0, rows), tokens.data() + done));
    TS_RETURN_IF_ERROR(stream_->upload(s_.positions.rows(0, rows), positions.data()));
    TS_RETURN_IF_ERROR(stream_->upload(s_.slots.rows(0, rows), slots.data()));
    Status st = forward(rows, Mode::kPrefill, seq.length, rows - 1);
    if (!st.ok()) {
      seq.length = old_length;
      return st;
    }
    seq.length += static_cast<int32_t>(n);
    done += n;
  }
  logits.resize(static_cast<size_t>(config_.vocab_size));
  TS_RETURN_IF_ERROR(stream_->download(s_.logits.rows(0, 1), logits.data()));
  return stream_->synchronize();
}

Status ModelRunner::decode(std::span<SequenceKv* const> seqs, std::span<const TokenId> tokens,
                           std::vector<float>& logits) {
  if (seqs.size() != tokens.size() || seqs.empty()) return invalid_argument("decode needs one token per sequence");
  if (seqs.size() > static_cast<size_t>(options_.max_batch_tokens)) {
    return invalid_argument(
        fmt::format("decode batch of {} exceeds max_batch_tokens {}", seqs.size(), options_.max_batch_tokens));
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
  const size_t b = seqs.size();
  const int bt = kv_->block_tokens();
  std::vector<int32_t> positions(b), slots(b), lens(b), tables(b * static_cast<size_t>(max_blocks_per_seq_), 0);
  for (size_t i = 0; i < b; ++i) {
    const SequenceKv& s = *seqs[i];
    positions[i] = s.length;
    slots[i] = s.blocks[static_cast<size_t>(s.length / bt)] * bt + s.length % bt;
    lens[i] = s.length + 1;
    std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + static_cast<std::ptrdiff_t>(i) * max_blocks_per_seq_);
  }
  const auto rows = static_cast<int64_t>(b);
  TS_RETURN_IF_ERROR(stream_->upload(s_.ids.rows(0, rows), tokens.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.positions.rows(0, rows), positions.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.slots.rows(0, rows), slots.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.context_lens.rows(0, rows), lens.data()));
  TS_RETURN_IF_ERROR(stream_->upload(s_.block_tables.rows(0, rows), tables.data()));
  TS_RETURN_IF_ERROR(forward(rows, Mode::kDecode, 0, 0));
  for (SequenceKv* s : seqs) s->length += 1;
  logits.resize(b * static_cast<size_t>(config_.vocab_size));
  TS_RETURN_IF_ERROR(stream_->download(s_.logits.rows(0, rows), logits.data()));
  return stream_->synchronize();
}

}  // namespace tessera::engine
