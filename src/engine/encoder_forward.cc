// ModelRunner's encoder (bert) path and the pooling of embeddings. An encoder's forward pass, per segment (one
// whole input) of a step:
//   x = token_embd[ids] + token_types[0] + position_embd[pos];  x = LayerNorm(x)
//   per layer:  q, k, v = x Wq + bq, x Wk + bk, x Wv + bv     (one matmul each over every row of the step)
//               att = attention over the segment's own rows, non-causal
//               x = LayerNorm(x + att Wo + bo)
//               x = LayerNorm(x + GELU(x Wup + bup) Wdown + bdown)
// which is BertModel's (post-LayerNorm) layer, as transformers and llama.cpp compute it. No K or V is kept:
// an input is computed in one step, so the KV cache's blocks only count what the scheduler admitted.
#include <fmt/core.h>

#include "engine/model_runner.h"

namespace tessera::engine {

std::string missing_embedding_ops(ops::Device& device, bool encoder) {
  constexpr int64_t kDim = 64;
  auto b = device.alloc(static_cast<size_t>(4 * kDim * 4));
  if (!b.ok()) return "no device memory";
  ops::Tensor x((*b).get(), 0, DType::kF32, {2, kDim});
  ops::Tensor out((*b).get(), static_cast<size_t>(2 * kDim * 4), DType::kF32, {1, kDim});
  ops::Tensor w((*b).get(), 0, DType::kF32, {kDim});
  ops::Tensor q((*b).get(), 0, DType::kF32, {2, 1, kDim});
  ops::Tensor o((*b).get(), static_cast<size_t>(2 * kDim * 4), DType::kF32, {2, 1, kDim});
  std::vector<std::pair<const char*, ops::Op>> probes = {{"pool", ops::PoolOp{x, out, ops::PoolKind::kMean}}};
  if (encoder) {
    probes.emplace_back("layer_norm", ops::LayerNormOp{x, w, w, x});
    probes.emplace_back("activation", ops::ActivationOp{x, x, ops::Activation::kGeluErf});
    probes.emplace_back("attention_noncausal", ops::AttentionNonCausalOp{q, q, q, o});
  }
  std::string missing;
  for (const auto& [name, op] : probes) {
    if (!device.supports(op).supported) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  return missing;
}

Status ModelRunner::upload_encoder_weights(const model::ModelWeights& weights) {
  const model::ModelConfig& c = config_;
  const int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  if (c.n_token_types < 1) return invalid_argument("an encoder needs at least one token type (token_types.weight)");
  Encoder e;
  TS_ASSIGN_OR_RETURN(token_embd_, upload(weights, "token_embd.weight", {c.vocab_size, d}));
  TS_ASSIGN_OR_RETURN(e.position_embd, upload(weights, "position_embd.weight", {c.max_seq_len, d}));
  TS_ASSIGN_OR_RETURN(e.type_embd, upload(weights, "token_types.weight", {c.n_token_types, d}));
  TS_ASSIGN_OR_RETURN(e.embd_norm, upload(weights, "token_embd_norm.weight", {d}));
  TS_ASSIGN_OR_RETURN(e.embd_norm_b, upload(weights, "token_embd_norm.bias", {d}));
  for (int l = 0; l < c.n_layers; ++l) {
    auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
    EncoderLayer L;
    TS_ASSIGN_OR_RETURN(L.wq, upload_matrix(weights, name("attn_q.weight"), {q, d}));
    TS_ASSIGN_OR_RETURN(L.bq, upload(weights, name("attn_q.bias"), {q}));
    TS_ASSIGN_OR_RETURN(L.wk, upload_matrix(weights, name("attn_k.weight"), {kv, d}));
    TS_ASSIGN_OR_RETURN(L.bk, upload(weights, name("attn_k.bias"), {kv}));
    TS_ASSIGN_OR_RETURN(L.wv, upload_matrix(weights, name("attn_v.weight"), {kv, d}));
    TS_ASSIGN_OR_RETURN(L.bv, upload(weights, name("attn_v.bias"), {kv}));
    TS_ASSIGN_OR_RETURN(L.wo, upload_matrix(weights, name("attn_output.weight"), {d, q}));
    TS_ASSIGN_OR_RETURN(L.bo, upload(weights, name("attn_output.bias"), {d}));
    TS_ASSIGN_OR_RETURN(L.attn_norm, upload(weights, name("attn_output_norm.weight"), {d}));
    TS_ASSIGN_OR_RETURN(L.attn_norm_b, upload(weights, name("attn_output_norm.bias"), {d}));
    TS_ASSIGN_OR_RETURN(L.w_up, upload_matrix(weights, name("ffn_up.weight"), {h, d}));
    TS_ASSIGN_OR_RETURN(L.b_up, upload(weights, name("ffn_up.bias"), {h}));
    TS_ASSIGN_OR_RETURN(L.w_down, upload_matrix(weights, name("ffn_down.weight"), {d, h}));
    TS_ASSIGN_OR_RETURN(L.b_down, upload(weights, name("ffn_down.bias"), {d}));
    TS_ASSIGN_OR_RETURN(L.out_norm, upload(weights, name("layer_output_norm.weight"), {d}));
    TS_ASSIGN_OR_RETURN(L.out_norm_b, upload(weights, name("layer_output_norm.bias"), {d}));
    e.layers.push_back(L);
  }
  encoder_ = std::move(e);
  return stream_->synchronize();
}

Status ModelRunner::forward_encoder(int64_t n, std::span<const Placed> placed) {
  const model::ModelConfig& c = config_;
  const Encoder& e = *encoder_;
  ops::Tensor x = s_.x.rows(0, n), delta = s_.delta.rows(0, n);
  ops::Tensor q = s_.q.rows(0, n), k = s_.k.rows(0, n), v = s_.v.rows(0, n), att = s_.att.rows(0, n);
  ops::Tensor q2 = q.reshaped({n, c.q_dim()}), k2 = k.reshaped({n, c.kv_dim()}), v2 = v.reshaped({n, c.kv_dim()});
  ops::Tensor att2 = att.reshaped({n, c.q_dim()});
  ops::Tensor hb = s_.hb.rows(0, n);
  TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{token_embd_, s_.ids.rows(0, n), x}));
  TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{e.type_embd, e.type_ids.rows(0, n), delta}));
  TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
  TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{e.position_embd, s_.positions.rows(0, n), delta}));
  TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
  TS_RETURN_IF_ERROR(run(ops::LayerNormOp{x, e.embd_norm, e.embd_norm_b, x, c.norm_eps}));
  for (const EncoderLayer& L : e.layers) {
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, L.wq, q2, L.bq}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, L.wk, k2, L.bk}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, L.wv, v2, L.bv}));
    for (const Placed& p : placed) {
      const auto len = static_cast<int64_t>(p.segment->tokens.size());
      TS_RETURN_IF_ERROR(run(ops::AttentionNonCausalOp{q.rows(p.row0, len), k.rows(p.row0, len), v.rows(p.row0, len),
                                                       att.rows(p.row0, len)}));
    }
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{att2, L.wo, delta, L.bo}));
    TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
    TS_RETURN_IF_ERROR(run(ops::LayerNormOp{x, L.attn_norm, L.attn_norm_b, x, c.norm_eps}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, L.w_up, hb, L.b_up}));
    TS_RETURN_IF_ERROR(run(ops::ActivationOp{hb, hb, ops::Activation::kGeluErf}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{hb, L.w_down, delta, L.b_down}));
    TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
    TS_RETURN_IF_ERROR(run(ops::LayerNormOp{x, L.out_norm, L.out_norm_b, x, c.norm_eps}));
  }
  return ok_status();
}

Status ModelRunner::pool_segments(std::span<const Placed> placed) {
  // The final hidden states: an encoder's last layer (in x), a decoder's output norm (in xb).
  const ops::Tensor& hidden = encoder_ ? s_.x : s_.xb;
  int64_t count = 0;
  for (const Placed& p : placed) {
    if (!p.segment->pooled) continue;
    const auto len = static_cast<int64_t>(p.segment->tokens.size());
    TS_RETURN_IF_ERROR(run(ops::PoolOp{hidden.rows(p.row0, len), pooled_.rows(count++, 1), p.segment->pool}));
  }
  if (count == 0) return ok_status();
  const auto dim = static_cast<size_t>(config_.dim);
  pooled_rows_.resize(static_cast<size_t>(count) * dim);
  TS_RETURN_IF_ERROR(stream_->download(pooled_.rows(0, count), pooled_rows_.data()));
  TS_RETURN_IF_ERROR(stream_->synchronize());
  size_t row = 0;
  for (const Placed& p : placed) {
    if (!p.segment->pooled) continue;
    p.segment->pooled(std::span<const float>(pooled_rows_).subspan(row++ * dim, dim));
  }
  return ok_status();
}

}  // namespace tessera::engine
