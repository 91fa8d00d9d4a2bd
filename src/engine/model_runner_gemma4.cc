// ModelRunner's Gemma 4 parts: the per-layer embeddings and the end of each layer, as llama.cpp's gemma4 graph
// (src/models/gemma4.cpp) orders them.
//
// Before layer 0 every layer gets an input of P = per_layer_dim values per token:
//   (rms_norm(E_l . x / sqrt(dim)) * proj_norm + T_l[token] * sqrt(P)) / sqrt(2)
// where x is the token embedding already scaled by sqrt(dim), T_l is layer l's slice of per_layer_token_embd
// [vocab, L x P] and E_l its slice of per_layer_model_proj [L x P, dim]. The slices are uploaded as tensors of their
// own (a column slice of the table is copied at load), so that every activation stays a contiguous row-major view:
// the inputs live in s_.ple as [L, rows, P].
// After the MLP (and its post norm), layer l ends with
//   x = x + ffn;  x = x + rms_norm(proj_l . (gelu(gate_l . x) * input_l)) * post_norm_l;  x = x * out_scale_l
// and the next layer's (or the output) norm of x.
//
// The mixture-of-experts layers (26B-A4B) run, from the residual stream x after attention,
//   mlp = post_ffw_norm_1(MLP(ffn_norm(x)))
//   p = softmax(ffn_gate_inp . (rms_norm(x) / sqrt(dim) * ffn_gate_inp.scale)); the top k, renormalised
//   moe = post_ffw_norm_2(sum_j p_j * ffn_down_exps.scale[e_j] * expert_{e_j}(pre_ffw_norm_2(x)))
// and mlp + moe is the feed-forward output (post_ffw_norm and the residual follow as in every layer).
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "base/quant.h"
#include "engine/model_runner.h"

namespace tessera::engine {
namespace {

// Columns [col0, col0 + cols) of every row of a 2-D weight, as bytes of a tensor of its own, into `bytes` (the
// caller's, kept from layer to layer: Gemma 4 E2B's slices are 55 MB each, and a fresh vector for each of its 35
// layers was zeroed, then faulted in page by page, for most of the model's load); returns their type: as stored when
// the columns are whole blocks of it, else f32 (widened; a test-size table of 16-wide slices in Q8_0).
Result<DType> slice_columns(const model::WeightTensor& w, int64_t col0, int64_t cols, std::vector<uint8_t>& bytes) {
  const int64_t rows = w.shape[0], width = w.shape[1];
  const auto block = static_cast<int64_t>(dtype_info(w.dtype).block_elems);
  const size_t row_bytes = dtype_bytes(w.dtype, static_cast<size_t>(width));
  if (col0 % block == 0 && cols % block == 0) {
    const size_t skip = dtype_bytes(w.dtype, static_cast<size_t>(col0));
    const size_t take = dtype_bytes(w.dtype, static_cast<size_t>(cols));
    bytes.resize(static_cast<size_t>(rows) * take);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(w.data + static_cast<size_t>(r) * row_bytes + skip, take,
                  bytes.data() + static_cast<size_t>(r) * take);
    return w.dtype;
  }
  bytes.resize(static_cast<size_t>(rows * cols) * sizeof(float));
  std::vector<float> row(static_cast<size_t>(width));
  auto* dst = reinterpret_cast<float*>(bytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    TS_RETURN_IF_ERROR(dequantize(w.data + static_cast<size_t>(r) * row_bytes, w.dtype, row));
    std::copy_n(row.begin() + col0, cols, dst + r * cols);
  }
  return DType::kF32;
}

}  // namespace

Status ModelRunner::upload_gemma4_layer(const model::ModelWeights& weights, int l, Layer& layer) {
  auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
  const int64_t d = config_.dim, p = config_.per_layer_dim, layers = config_.n_layers;
  if (const model::WeightTensor* s = weights.find(name("layer_output_scale.weight"))) {
    if (s->numel() != 1) return invalid_argument(fmt::format("{} holds {} values, not 1", s->name, s->numel()));
    std::vector<float> v(1);
    TS_RETURN_IF_ERROR(dequantize(s->data, s->dtype, v));
    layer.out_scale = v[0];
  }
  if (p == 0) return ok_status();
  if (l == 0) {
    TS_ASSIGN_OR_RETURN(pl_proj_norm_, upload(weights, "per_layer_proj_norm.weight", {p}));
  }
  TS_ASSIGN_OR_RETURN(layer.pl_gate, upload_matrix(weights, name("inp_gate.weight"), {p, d}));
  TS_ASSIGN_OR_RETURN(layer.pl_proj, upload_matrix(weights, name("proj.weight"), {d, p}));
  TS_ASSIGN_OR_RETURN(layer.pl_post_norm, upload(weights, name("post_norm.weight"), {d}));
  // Layer l's rows of the model projection are whole rows: a view of the file's bytes.
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* proj, weights.require("per_layer_model_proj.weight", {layers * p, d}));
  const size_t row_bytes = proj->bytes / static_cast<size_t>(layers * p);
  const model::WeightTensor slice{proj->name,
                                  proj->dtype,
                                  {p, d},
                                  proj->data + static_cast<size_t>(l * p) * row_bytes,
                                  static_cast<size_t>(p) * row_bytes};
  model::ModelWeights one;
  one.add(slice);
  TS_ASSIGN_OR_RETURN(layer.pl_model_proj, upload_matrix(one, slice.name, {p, d}));
  // Layer l's columns of the token table are not contiguous in the file: copied (or widened) here.
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* table,
                      weights.require("per_layer_token_embd.weight", {config_.vocab_size, layers * p}));
  TS_ASSIGN_OR_RETURN(const DType type, slice_columns(*table, l * p, p, slice_scratch_));
  model::ModelWeights tw;
  tw.add({table->name, type, {config_.vocab_size, p}, slice_scratch_.data(), slice_scratch_.size()});
  TS_ASSIGN_OR_RETURN(layer.pl_table, upload(tw, table->name, {config_.vocab_size, p}, WeightUse::kTable));
  TS_RETURN_IF_ERROR(stream_->synchronize());  // the next layer rewrites the scratch
  if (l == layers - 1) std::vector<uint8_t>().swap(slice_scratch_);
  return ok_status();
}

Status ModelRunner::upload_gemma4_experts(const model::ModelWeights& weights, int l, Layer& layer) {
  auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
  const int64_t d = config_.dim, h = layer.hidden;
  TS_ASSIGN_OR_RETURN(layer.w_gate, upload_matrix(weights, name("ffn_gate.weight"), {h, d}));
  TS_ASSIGN_OR_RETURN(layer.w_up, upload_matrix(weights, name("ffn_up.weight"), {h, d}));
  TS_ASSIGN_OR_RETURN(layer.w_down, upload_matrix(weights, name("ffn_down.weight"), {d, h}));
  TS_ASSIGN_OR_RETURN(layer.experts_norm, upload(weights, name("pre_ffw_norm_2.weight"), {d}));
  TS_ASSIGN_OR_RETURN(layer.mlp_post_norm, upload(weights, name("post_ffw_norm_1.weight"), {d}));
  TS_ASSIGN_OR_RETURN(layer.experts_post_norm, upload(weights, name("post_ffw_norm_2.weight"), {d}));
  TS_ASSIGN_OR_RETURN(layer.expert_scale, upload(weights, name("ffn_down_exps.scale"), {config_.moe.n_experts}));
  // The router's input norm: llama.cpp's rms_norm, then 1/sqrt(dim), then the scale, as one norm weight.
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* scale, weights.require(name("ffn_gate_inp.scale"), {d}));
  std::vector<float> w(static_cast<size_t>(d));
  TS_RETURN_IF_ERROR(dequantize(scale->data, scale->dtype, w));
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  for (float& v : w) v *= inv;
  TS_ASSIGN_OR_RETURN(layer.router_norm, alloc(DType::kF32, {d}));
  TS_RETURN_IF_ERROR(stream_->upload(layer.router_norm, w.data()));
  return stream_->synchronize();  // `w` is freed on return
}

Status ModelRunner::run_gemma4_moe(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out) {
  const model::ModelConfig& c = config_;
  const ops::Tensor x = s_.x.rows(0, n), moe = s_.moe_out.rows(0, n);
  TS_RETURN_IF_ERROR(run_mlp(lw, n, in, out));
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{out, lw.mlp_post_norm, out, c.norm_eps}));
  // `in` (the MLP's normed input) is free from here: it holds the router's input, then the experts'.
  ops::Tensor logits = s_.router_logits.rows(0, n), ids = s_.expert_ids.rows(0, n),
              weights = s_.expert_weights.rows(0, n);
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{x, lw.router_norm, in, c.norm_eps}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.router, logits}));
  ops::MoeRouteOp route{logits, ids, weights};
  route.gating = ops::MoeGating::kSoftmax;
  route.normalize = c.moe.normalize_weights;
  route.scale = c.moe.weights_scale;
  route.expert_scale = lw.expert_scale;
  TS_RETURN_IF_ERROR(run(route));
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{x, lw.experts_norm, in, c.norm_eps}));
  ops::MoeExpertsOp experts{in, ids, weights, lw.experts_gate, lw.experts_up, lw.experts_down, moe};
  experts.gate_up = lw.experts_gate_up;
  experts.act = ops::Activation::kGeluTanh;
  TS_RETURN_IF_ERROR(run(experts));
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{moe, lw.experts_post_norm, moe, c.norm_eps}));
  return run(ops::AddOp{out, moe, out});
}

Status ModelRunner::alloc_gemma4_scratch() {
  const model::ModelConfig& c = config_;
  if (c.moe.dense_beside_experts && c.has_moe_layers()) {
    TS_ASSIGN_OR_RETURN(s_.moe_out, alloc(DType::kF32, {options_.max_batch_tokens, c.dim}));
    scratch_buffers_.push_back(s_.moe_out.buffer);
  }
  if (c.v_norm) {
    const std::vector<float> ones(static_cast<size_t>(c.max_head_dim()), 1.0f);
    TS_ASSIGN_OR_RETURN(ones_, alloc(DType::kF32, {c.max_head_dim()}));
    TS_RETURN_IF_ERROR(stream_->upload(ones_, ones.data()));
  }
  if (c.per_layer_dim == 0) return stream_->synchronize();
  const int64_t n = options_.max_batch_tokens;
  TS_ASSIGN_OR_RETURN(s_.ple, alloc(DType::kF32, {c.n_layers, n, c.per_layer_dim}));
  TS_ASSIGN_OR_RETURN(s_.pl_hidden, alloc(DType::kF32, {n, c.per_layer_dim}));
  scratch_buffers_.push_back(s_.ple.buffer);
  scratch_buffers_.push_back(s_.pl_hidden.buffer);
  return stream_->synchronize();
}

Status ModelRunner::run_per_layer_inputs(int64_t n) {
  const model::ModelConfig& c = config_;
  const int64_t p = c.per_layer_dim;
  const ops::Tensor x = s_.x.rows(0, n), ids = s_.ids.rows(0, n), proj = s_.pl_hidden.rows(0, n);
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& lw = layers_[static_cast<size_t>(l)];
    const ops::Tensor in = s_.ple.rows(l, 1).reshaped({s_.ple.dim(1), p}).rows(0, n);
    TS_RETURN_IF_ERROR(run(ops::EmbeddingOp{lw.pl_table, ids, in, std::sqrt(static_cast<float>(p))}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, lw.pl_model_proj, proj}));
    TS_RETURN_IF_ERROR(run(ops::ScaleOp{proj, proj, 1.0f / std::sqrt(static_cast<float>(c.dim))}));
    TS_RETURN_IF_ERROR(run(ops::RmsNormOp{proj, pl_proj_norm_, proj, c.norm_eps}));
    TS_RETURN_IF_ERROR(run(ops::AddOp{in, proj, in}));
    TS_RETURN_IF_ERROR(run(ops::ScaleOp{in, in, 1.0f / std::sqrt(2.0f)}));
  }
  return ok_status();
}

Status ModelRunner::run_gemma4_layer_end(const Layer& lw, int l, int64_t n, const ops::Tensor& next_norm) {
  const model::ModelConfig& c = config_;
  const ops::Tensor x = s_.x.rows(0, n), xb = s_.xb.rows(0, n), delta = s_.delta.rows(0, n);
  const bool scaled = lw.out_scale != 1.0f;
  if (c.per_layer_dim > 0) {
    TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
    const ops::Tensor in = s_.ple.rows(l, 1).reshaped({s_.ple.dim(1), c.per_layer_dim}).rows(0, n);
    const ops::Tensor g = s_.pl_hidden.rows(0, n);
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{x, lw.pl_gate, g}));
    TS_RETURN_IF_ERROR(run(ops::SiluMulOp{g, in, g, ops::Activation::kGeluTanh}));
    TS_RETURN_IF_ERROR(run(ops::MatMulOp{g, lw.pl_proj, delta}));
    TS_RETURN_IF_ERROR(run(ops::RmsNormOp{delta, lw.pl_post_norm, delta, c.norm_eps}));
  }
  if (!scaled) return run(ops::AddRmsNormOp{x, delta, next_norm, xb, c.norm_eps});
  TS_RETURN_IF_ERROR(run(ops::AddOp{x, delta, x}));
  TS_RETURN_IF_ERROR(run(ops::ScaleOp{x, x, lw.out_scale}));
  return run(ops::RmsNormOp{x, next_norm, xb, c.norm_eps});
}

}  // namespace tessera::engine
