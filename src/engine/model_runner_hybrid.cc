// ModelRunner's hybrid-model parts (Qwen3.5): gated delta-net linear-attention layers over per-sequence recurrent
// state slots (engine/kv_cache.h), the shared expert of Qwen3.5-MoE, and M-RoPE's frequencies for text positions.
// The arithmetic is the operators' (ops.h: causal_conv1d, gated_delta_rule); this file is the wiring, as llama.cpp's
// qwen35 graph orders it: projections, convolution + SiLU, l2-normed q/k, the delta rule, a per-head RMSNorm times
// SiLU(z), the output projection.
#include <cmath>

#include <fmt/format.h>

#include "base/quant.h"
#include "engine/model_runner.h"

namespace tessera::engine {

Status ModelRunner::upload_linear(const model::ModelWeights& weights, int l, Layer& layer) {
  auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
  const model::LinearAttentionConfig& la = config_.linear;
  const int64_t d = config_.dim, ch = la.conv_channels(), vd = la.value_dim(), hv = la.v_heads;
  TS_ASSIGN_OR_RETURN(layer.w_qkv, upload_matrix(weights, name("attn_qkv.weight"), {ch, d}));
  TS_ASSIGN_OR_RETURN(layer.w_z, upload_matrix(weights, name("attn_gate.weight"), {vd, d}));
  TS_ASSIGN_OR_RETURN(layer.w_beta, upload_matrix(weights, name("ssm_beta.weight"), {hv, d}));
  TS_ASSIGN_OR_RETURN(layer.w_alpha, upload_matrix(weights, name("ssm_alpha.weight"), {hv, d}));
  TS_ASSIGN_OR_RETURN(layer.ssm_out, upload_matrix(weights, name("ssm_out.weight"), {d, vd}));
  TS_ASSIGN_OR_RETURN(layer.dt_bias, upload(weights, name("ssm_dt.bias"), {hv}));
  TS_ASSIGN_OR_RETURN(layer.ssm_a, upload(weights, name("ssm_a"), {hv}));
  TS_ASSIGN_OR_RETURN(layer.ssm_norm, upload(weights, name("ssm_norm.weight"), {la.head_dim}));
  // The convolution's operator takes f32 taps; a file that stores them otherwise is widened here.
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* conv,
                      weights.require(name("ssm_conv1d.weight"), {ch, la.conv_kernel}));
  std::vector<float> taps(static_cast<size_t>(conv->numel()));
  TS_RETURN_IF_ERROR(dequantize(conv->data, conv->dtype, taps));
  TS_ASSIGN_OR_RETURN(layer.conv_w, alloc(DType::kF32, {ch, la.conv_kernel}));
  TS_RETURN_IF_ERROR(stream_->upload(layer.conv_w, taps.data()));
  resident_bytes_ += layer.conv_w.bytes();
  streamed_bytes_ += layer.conv_w.bytes();
  return stream_->synchronize();  // `taps` is freed on return
}

Status ModelRunner::upload_shared_expert(const model::ModelWeights& weights, int l, Layer& layer) {
  auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
  const int64_t d = config_.dim, sh = config_.moe.shared_expert_hidden_dim;
  TS_ASSIGN_OR_RETURN(layer.shexp_gate, upload_matrix(weights, name("ffn_gate_shexp.weight"), {sh, d}));
  TS_ASSIGN_OR_RETURN(layer.shexp_up, upload_matrix(weights, name("ffn_up_shexp.weight"), {sh, d}));
  TS_ASSIGN_OR_RETURN(layer.shexp_down, upload_matrix(weights, name("ffn_down_shexp.weight"), {d, sh}));
  TS_ASSIGN_OR_RETURN(ops::Tensor gate, upload(weights, name("ffn_gate_inp_shexp.weight"), {d}));
  layer.shexp_gate_inp = gate.reshaped({1, d});
  return ok_status();
}

Status ModelRunner::alloc_hybrid_scratch() {
  const model::ModelConfig& c = config_;
  const int64_t n = options_.max_batch_tokens;
  Scratch& s = s_;
  std::vector<const ops::Tensor*> made;
  if (c.attn_output_gate) {
    TS_ASSIGN_OR_RETURN(s.qg, alloc(DType::kF32, {n, c.n_heads, 2 * c.head_dim}));
    TS_ASSIGN_OR_RETURN(s.gate, alloc(DType::kF32, {n, c.n_heads, c.head_dim}));
    made.insert(made.end(), {&s.qg, &s.gate});
  }
  if (c.has_linear_layers()) {
    const model::LinearAttentionConfig& la = c.linear;
    TS_ASSIGN_OR_RETURN(s.mixed, alloc(DType::kF32, {n, la.conv_channels()}));
    TS_ASSIGN_OR_RETURN(s.conv_out, alloc(DType::kF32, {n, la.conv_channels()}));
    TS_ASSIGN_OR_RETURN(s.z, alloc(DType::kF32, {n, la.value_dim()}));
    TS_ASSIGN_OR_RETURN(s.alpha, alloc(DType::kF32, {n, la.v_heads}));
    TS_ASSIGN_OR_RETURN(s.beta, alloc(DType::kF32, {n, la.v_heads}));
    TS_ASSIGN_OR_RETURN(s.lin, alloc(DType::kF32, {n, la.v_heads, la.head_dim}));
    made.insert(made.end(), {&s.mixed, &s.conv_out, &s.z, &s.alpha, &s.beta, &s.lin});
  }
  if (c.moe.shared_expert_hidden_dim > 0) {
    const int64_t sh = c.moe.shared_expert_hidden_dim;
    TS_ASSIGN_OR_RETURN(s.sh_hb, alloc(DType::kF32, {n, sh}));
    TS_ASSIGN_OR_RETURN(s.sh_hb2, alloc(DType::kF32, {n, sh}));
    TS_ASSIGN_OR_RETURN(s.sh_out, alloc(DType::kF32, {n, c.dim}));
    TS_ASSIGN_OR_RETURN(s.sh_gate, alloc(DType::kF32, {n, 1}));
    made.insert(made.end(), {&s.sh_hb, &s.sh_hb2, &s.sh_out, &s.sh_gate});
  }
  for (const ops::Tensor* t : made) scratch_buffers_.push_back(t->buffer);
  return ok_status();
}

Status ModelRunner::run_linear_attention(const Layer& lw, int l, int64_t n, std::span<const Placed> placed,
                                         const ops::Tensor& in, const ops::Tensor& out) {
  const model::LinearAttentionConfig& la = config_.linear;
  const int64_t vd = la.value_dim();
  ops::Tensor mixed = s_.mixed.rows(0, n), conv = s_.conv_out.rows(0, n), z = s_.z.rows(0, n);
  ops::Tensor alpha = s_.alpha.rows(0, n), beta = s_.beta.rows(0, n), lin = s_.lin.rows(0, n);
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_qkv, mixed}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_z, z}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_beta, beta}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.w_alpha, alpha}));
  for (const Placed& p : placed) {
    const SequenceKv& seq = *p.segment->seq;
    if (seq.state_slot < 0)
      return failed_precondition(
          fmt::format("layer {}: a sequence of this hybrid model has no recurrent-state slot", l));
    const auto len = static_cast<int64_t>(p.segment->tokens.size());
    // Rows [from, to) of the segment over the slot's state (reset at position 0).
    auto rows = [&](int64_t from, int64_t to) -> Status {
      const int64_t r0 = p.row0 + from, count = to - from;
      const bool fresh = p.start + from == 0;
      TS_RETURN_IF_ERROR(run(ops::CausalConv1dOp{mixed.rows(r0, count), lw.conv_w, kv_->conv_state(l, seq.state_slot),
                                                 conv.rows(r0, count), fresh}));
      ops::GatedDeltaRuleOp rule{conv.rows(r0, count),
                                 alpha.rows(r0, count),
                                 beta.rows(r0, count),
                                 lw.dt_bias,
                                 lw.ssm_a,
                                 kv_->recurrent_state(l, seq.state_slot),
                                 lin.rows(r0, count)};
      rule.k_heads = la.k_heads;
      rule.eps = config_.norm_eps;
      rule.reset = fresh;
      return run(rule);
    };
    // State checkpoints inside the segment: the rows up to each, this layer's state out, then the rest (the
    // operators give the same bits in one run or several).
    int64_t done = 0;
    for (int i = 0; i < p.segment->num_states; ++i) {
      const Segment::StateOut& st = p.segment->states[static_cast<size_t>(i)];
      const int64_t split = st.position - p.start;
      TS_RETURN_IF_ERROR(rows(done, split));
      done = split;
      uint8_t* out_state = st.out + state_offset(l);
      const ops::Tensor cs = kv_->conv_state(l, seq.state_slot), rs = kv_->recurrent_state(l, seq.state_slot);
      TS_RETURN_IF_ERROR(stream_->download(cs, out_state));
      TS_RETURN_IF_ERROR(stream_->download(rs, out_state + cs.bytes()));
      TS_RETURN_IF_ERROR(stream_->synchronize());
    }
    if (done < len) TS_RETURN_IF_ERROR(rows(done, len));
  }
  // Per value head: RMSNorm with ssm_norm, times SiLU(z); then the output projection.
  ops::Tensor heads = lin.reshaped({n * la.v_heads, la.head_dim});
  TS_RETURN_IF_ERROR(run(ops::RmsNormOp{heads, lw.ssm_norm, heads, config_.norm_eps}));
  ops::Tensor flat = lin.reshaped({n, vd});
  TS_RETURN_IF_ERROR(run(ops::SiluMulOp{z, flat, flat}));
  return run(ops::MatMulOp{flat, lw.ssm_out, out});
}

Status ModelRunner::run_shared_expert(const Layer& lw, int64_t n, const ops::Tensor& in, const ops::Tensor& out) {
  ops::Tensor hb = s_.sh_hb.rows(0, n), hb2 = s_.sh_hb2.rows(0, n), y = s_.sh_out.rows(0, n);
  ops::Tensor g = s_.sh_gate.rows(0, n);
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.shexp_gate, hb}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.shexp_up, hb2}));
  TS_RETURN_IF_ERROR(run(ops::SiluMulOp{hb, hb2, hb}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{hb, lw.shexp_down, y}));
  TS_RETURN_IF_ERROR(run(ops::MatMulOp{in, lw.shexp_gate_inp, g}));
  TS_RETURN_IF_ERROR(run(ops::SiluMulOp{g, y, y, ops::Activation::kSigmoid}));  // one gate per row, broadcast
  return run(ops::AddOp{out, y, out});
}

size_t ModelRunner::state_offset(int layer) const {
  // export_state's layout: each linear layer's convolution window, then its delta-rule state, in layer order.
  size_t at = 0;
  for (int l = 0; l < layer; ++l) {
    if (config_.layer_kind(l).attention != model::AttentionKind::kLinear) continue;
    at += kv_->conv_state(l, 0).bytes() + kv_->recurrent_state(l, 0).bytes();
  }
  return at;
}

std::vector<float> ModelRunner::mrope_frequencies() const {
  const model::ModelConfig& c = config_;
  std::vector<float> f;
  if (c.rope_sections.size() != 4) return f;
  const int rot = c.rope_dims > 0 ? c.rope_dims : c.head_dim;
  const int* s = c.rope_sections.data();
  const int sect_dims = s[0] + s[1] + s[2] + s[3];
  // Interleaved M-RoPE (llama.cpp's IMROPE): pair p takes section sector % 3 of the first three while sector is
  // inside it, else the fourth. For text, llama.cpp gives the first three sections the token's position and the
  // fourth position 0: a pair of the fourth never turns (frequency 0).
  for (int p = 0; p < rot / 2; ++p) {
    const int sector = sect_dims > 0 ? p % sect_dims : 0;
    const bool positional = (sector % 3 == 1 && sector < 3 * s[1]) || (sector % 3 == 2 && sector < 3 * s[2]) ||
                            (sector % 3 == 0 && sector < 3 * s[0]);
    f.push_back(positional ? std::pow(c.rope_theta, -2.0f * static_cast<float>(p) / static_cast<float>(rot)) : 0.0f);
  }
  return f;
}

}  // namespace tessera::engine
