// ModelRunner's weights: what of a model the device runs as stored (probed with tiny real operands), and the
// upload of every tensor (widened to f32, or repacked by the backend, where the device asks for it), the rotary
// tables and the per-layer views. The forward and the step are in model_runner.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/quant.h"
#include "engine/model_runner.h"
#include "model/rope_scaling.h"

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

// Whether `device` runs mixture-of-experts layers whose expert matrices are stored as `dtype` (the smallest
// tensors of whole blocks: one expert, one block square).
bool device_runs_experts(ops::Device& device, DType dtype) {
  const int64_t b = dtype_info(dtype).block_elems;
  const int64_t side = std::max<int64_t>(b, 1);
  auto wb = device.alloc(dtype_bytes(dtype, static_cast<size_t>(side * side)));
  auto xb = device.alloc(static_cast<size_t>(side) * 4);
  auto ob = device.alloc(static_cast<size_t>(side) * 4);
  auto ib = device.alloc(4);
  auto lb = device.alloc(4);
  if (!wb.ok() || !xb.ok() || !ob.ok() || !ib.ok() || !lb.ok()) return false;
  ops::Tensor w(wb->get(), 0, dtype, {1, side, side});
  ops::Tensor x(xb->get(), 0, DType::kF32, {1, side}), out(ob->get(), 0, DType::kF32, {1, side});
  ops::Tensor ids(ib->get(), 0, DType::kI32, {1, 1}), weights(lb->get(), 0, DType::kF32, {1, 1});
  ops::Tensor logits(lb->get(), 0, DType::kF32, {1, 1});
  return device.supports(ops::MoeRouteOp{logits, ids, weights}).supported &&
         device.supports(ops::MoeExpertsOp{x, ids, weights, w, w, w, out}).supported;
}

bool device_runs(ops::Device& device, const model::WeightTensor& w) {
  const int rank = static_cast<int>(w.shape.size());
  if (rank == 3) return device_runs_experts(device, w.dtype);
  return device_runs_weight(device, w.dtype, w.shape.back(), rank, /*is_embedding=*/false);
}

}  // namespace

std::vector<std::string> unsupported_layer_features(ops::Device& device, const model::ModelConfig& config) {
  std::vector<std::string> out;
  if (config.has_moe_layers() && !device_runs_experts(device, DType::kF32)) {
    out.push_back("mixture-of-experts layers (moe_route, moe_experts)");
  } else if (config.has_moe_layers() && config.moe.dense_beside_experts) {
    // gemma4's per-expert output scales: moe_route with expert_scale, probed with one expert.
    auto fb = device.alloc(16);
    if (fb.ok()) {
      ops::Tensor one(fb->get(), 0, DType::kF32, {1, 1}), id(fb->get(), 4, DType::kI32, {1, 1});
      ops::Tensor w(fb->get(), 8, DType::kF32, {1, 1}), scale(fb->get(), 12, DType::kF32, {1});
      ops::MoeRouteOp route{one, id, w};
      route.expert_scale = scale;
      if (!device.supports(route).supported) out.push_back("per-expert output scales (moe_route expert_scale)");
    }
  }
  if (!config.causal) {
    if (std::string missing = missing_embedding_ops(device, /*encoder=*/true); !missing.empty())
      out.push_back(fmt::format("encoder operators ({})", missing));
  }
  if (config.has_linear_layers() || config.attn_output_gate || config.rope_dims > 0) {
    // Linear attention, Qwen3.5's gated attention and partial rotary, each probed with the smallest tensors.
    auto fb = device.alloc(64 * 4);
    if (fb.ok()) {
      ops::Buffer* b = fb->get();
      ops::Tensor row(b, 0, DType::kF32, {1, 6}), w(b, 0, DType::kF32, {6, 2}), st(b, 0, DType::kF32, {1, 6});
      ops::Tensor qkv(b, 0, DType::kF32, {1, 6}), hv(b, 0, DType::kF32, {1, 1}), h1(b, 0, DType::kF32, {1});
      ops::Tensor state(b, 0, DType::kF32, {1, 2, 2}), o(b, 0, DType::kF32, {1, 1, 2});
      ops::GatedDeltaRuleOp rule{qkv, hv, hv, h1, h1, state, o};
      rule.k_heads = 1;
      if (config.has_linear_layers() &&
          (!device.supports(ops::CausalConv1dOp{row, w, st, row}).supported || !device.supports(rule).supported))
        out.push_back("linear-attention layers (causal_conv1d, gated_delta_rule)");
      ops::Tensor x(b, 0, DType::kF32, {1, 1, 4}), half(b, 0, DType::kF32, {1, 1, 2});
      if (config.attn_output_gate &&
          (!device.supports(ops::SplitHeadsOp{x, half, half}).supported ||
           !device.supports(ops::SiluMulOp{hv, hv, hv, ops::Activation::kSigmoid}).supported))
        out.push_back("gated attention (split_heads, sigmoid silu_mul)");
      ops::Tensor pos(b, 0, DType::kI32, {1});
      ops::RopeOp rope{x, x, pos};
      rope.rot_dims = 2;
      if (config.rope_dims > 0 && !device.supports(rope).supported) out.push_back("partial rotary (rope rot_dims)");
    }
  }
  if (config.per_layer_dim > 0 || config.layer_output_scale || config.final_softcap > 0.0f) {
    auto fb = device.alloc(16);
    if (fb.ok()) {
      ops::Tensor x(fb->get(), 0, DType::kF32, {1, 4});
      const bool scale = device.supports(ops::ScaleOp{x, x, 0.5f}).supported;
      if ((config.per_layer_dim > 0 || config.layer_output_scale) && !scale)
        out.push_back("per-layer embeddings and output scales (scale)");
      if (config.final_softcap > 0.0f &&
          (!scale || !device.supports(ops::ActivationOp{x, x, ops::Activation::kTanh}).supported))
        out.push_back("final logit softcap (scale, tanh activation)");
    }
  }
  if (config.attn_sinks) {
    // One query head over a one-block f32 cache, with a sink.
    const int64_t hd = config.head_dim;
    auto cb = device.alloc(static_cast<size_t>(hd) * 4);
    auto qb = device.alloc(static_cast<size_t>(hd) * 4);
    auto ob = device.alloc(static_cast<size_t>(hd) * 4);
    auto ib = device.alloc(8);
    if (cb.ok() && qb.ok() && ob.ok() && ib.ok()) {
      ops::Tensor cache(cb->get(), 0, DType::kF32, {1, 1, 1, hd}), q(qb->get(), 0, DType::kF32, {1, 1, hd});
      ops::Tensor o(ob->get(), 0, DType::kF32, {1, 1, hd}), table(ib->get(), 0, DType::kI32, {1, 1});
      ops::Tensor lens(ib->get(), 4, DType::kI32, {1}), sinks(ib->get(), 4, DType::kF32, {1});
      ops::AttentionDecodeOp probe{q, cache, cache, table, lens, o};
      probe.sinks = sinks;
      if (!device.supports(probe).supported) out.push_back("attention sinks");
    }
  }
  return out;
}

std::vector<DType> widened_weight_types(ops::Device& device, const model::ModelWeights& weights) {
  std::vector<DType> out;
  for (const model::WeightTensor& w : weights.tensors()) {
    if (w.dtype == DType::kF32 || std::find(out.begin(), out.end(), w.dtype) != out.end()) continue;
    // As a matrix only: an embedding table a device cannot index in place is widened for lookups alone,
    // which costs memory but no speed.
    if (!device_runs(device, w)) out.push_back(w.dtype);
  }
  return out;
}

Result<ops::Tensor> ModelRunner::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  ops::Tensor t(nullptr, 0, dtype, shape);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device_.alloc(t.bytes()));
  t.buffer = buf.get();
  buffers_.push_back(std::move(buf));
  return t;
}

Result<ops::Tensor> ModelRunner::upload(const model::ModelWeights& weights, const std::string& name,
                                        std::vector<int64_t> shape, WeightUse use) {
  const bool matrix = use == WeightUse::kMatrix || use == WeightUse::kExperts;
  TS_ASSIGN_OR_RETURN(const model::WeightTensor* w, weights.require(name, shape));
  ops::Tensor t(nullptr, 0, w->dtype, {});
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.dims.begin());
  if (t.bytes() != w->bytes)
    return internal_error(fmt::format("tensor {} holds {} bytes, expected {}", name, w->bytes, t.bytes()));
  const void* src = w->data;
  std::vector<uint8_t> converted;
  const std::optional<DType> want = options_.weight_dtype;
  if (matrix && want && *want != w->dtype && w->dtype == DType::kF32) {
    if (t.dim(t.rank - 1) % dtype_info(*want).block_elems == 0) {
      converted.resize(dtype_bytes(*want, static_cast<size_t>(t.numel())));
      TS_RETURN_IF_ERROR(
          quantize({reinterpret_cast<const float*>(w->data), static_cast<size_t>(t.numel())}, *want, converted.data()));
      t.dtype = *want;
      src = converted.data();
      ++converted_;
    } else {
      ++unconverted_;
    }
  }
  std::vector<float> widened;
  const bool runs = use == WeightUse::kExperts
                        ? device_runs_experts(device_, t.dtype)
                        : device_runs_weight(device_, t.dtype, t.dim(t.rank - 1), t.rank,
                                             (name == "token_embd.weight" && !matrix) || use == WeightUse::kTable);
  if (!runs) {
    // The device cannot run this weight type: widen it to f32 on the host, so that an f16/bf16/q8_0/q4_0
    // model from a GGUF or safetensors file still runs (at f32's memory cost).
    widened.resize(static_cast<size_t>(t.numel()));
    TS_RETURN_IF_ERROR(dequantize(src, t.dtype, widened));
    t.dtype = DType::kF32;
    src = widened.data();
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::Buffer> buf, device_.alloc(t.bytes()));
  t.buffer = buf.get();
  buffers_.push_back(std::move(buf));
  TS_RETURN_IF_ERROR(stream_->upload(t, src));
  resident_bytes_ += t.bytes();
  // A matmul weight may be re-laid for the device's kernels (cpu: panels); an embedding table only when a tied
  // classifier shares it (upload_weights).
  if (matrix) {
    TS_RETURN_IF_ERROR(stream_->synchronize());
    // The classifier: prefill multiplies only its last row(s) by it, so its cost is decode's.
    ops::WeightHints hints;
    hints.decode_bound = name == "output.weight" || name == "token_embd.weight";
    TS_RETURN_IF_ERROR(device_.prepare_matmul_weight(t, hints));
  }
  // A token reads n_experts_used of an expert tensor's n_experts matrices.
  if (use == WeightUse::kExperts) {
    streamed_bytes_ += t.bytes() / static_cast<size_t>(t.dim(0)) * static_cast<size_t>(config_.moe.n_experts_used);
  } else if ((name != "token_embd.weight" || matrix) && use != WeightUse::kTable) {
    streamed_bytes_ += t.bytes();
  }
  if (!widened.empty()) TS_RETURN_IF_ERROR(stream_->synchronize());  // `widened` is freed on return
  return t;
}

Result<ops::Tensor> ModelRunner::upload_optional(const model::ModelWeights& weights, const std::string& name,
                                                 std::vector<int64_t> shape) {
  if (weights.find(name) == nullptr) return ops::Tensor();
  return upload(weights, name, std::move(shape));
}

Status ModelRunner::upload_ffn(const model::ModelWeights& weights, int l, Layer& layer) {
  auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
  const int64_t d = config_.dim, h = config_.layer_hidden_dim(l);
  layer.kind = config_.layer_kind(l);
  if (layer.kind.ffn == model::FfnKind::kDense) {
    TS_ASSIGN_OR_RETURN(layer.w_gate, upload_matrix(weights, name("ffn_gate.weight"), {h, d}));
    TS_ASSIGN_OR_RETURN(layer.w_up, upload_matrix(weights, name("ffn_up.weight"), {h, d}));
    TS_ASSIGN_OR_RETURN(layer.w_down, upload_matrix(weights, name("ffn_down.weight"), {d, h}));
    return ok_status();
  }
  const int64_t e = config_.moe.n_experts, f = config_.moe.expert_hidden_dim;
  TS_ASSIGN_OR_RETURN(layer.router, upload_matrix(weights, name("ffn_gate_inp.weight"), {e, d}));
  TS_ASSIGN_OR_RETURN(layer.router_bias, upload_optional(weights, name("ffn_gate_inp.bias"), {e}));
  if (weights.find(name("ffn_gate_up_exps.weight")) != nullptr) {  // llama.cpp's fused [E, 2 ff, dim]
    TS_ASSIGN_OR_RETURN(layer.experts_gate_up,
                        upload(weights, name("ffn_gate_up_exps.weight"), {e, 2 * f, d}, WeightUse::kExperts));
  } else {
    TS_ASSIGN_OR_RETURN(layer.experts_gate,
                        upload(weights, name("ffn_gate_exps.weight"), {e, f, d}, WeightUse::kExperts));
    TS_ASSIGN_OR_RETURN(layer.experts_up, upload(weights, name("ffn_up_exps.weight"), {e, f, d}, WeightUse::kExperts));
  }
  TS_ASSIGN_OR_RETURN(layer.experts_down,
                      upload(weights, name("ffn_down_exps.weight"), {e, d, f}, WeightUse::kExperts));
  TS_ASSIGN_OR_RETURN(layer.experts_gate_bias, upload_optional(weights, name("ffn_gate_exps.bias"), {e, f}));
  TS_ASSIGN_OR_RETURN(layer.experts_up_bias, upload_optional(weights, name("ffn_up_exps.bias"), {e, f}));
  TS_ASSIGN_OR_RETURN(layer.experts_down_bias, upload_optional(weights, name("ffn_down_exps.bias"), {e, d}));
  if (config_.moe.shared_expert_hidden_dim > 0) TS_RETURN_IF_ERROR(upload_shared_expert(weights, l, layer));
  if (config_.moe.dense_beside_experts) TS_RETURN_IF_ERROR(upload_gemma4_experts(weights, l, layer));
  return ok_status();
}

Status ModelRunner::upload_weights(const model::ModelWeights& weights) {
  const int64_t d = config_.dim;
  TS_ASSIGN_OR_RETURN(token_embd_, upload(weights, "token_embd.weight", {config_.vocab_size, d}));
  TS_ASSIGN_OR_RETURN(output_norm_, upload(weights, "output_norm.weight", {d}));
  // With tied embeddings the classifier is the matrix in the type upload_matrix() would give it: as stored, or
  // RunnerOptions::weight_dtype for an f32 one. The lookup may have widened its copy to f32 (the embedding
  // operator takes f32 tables); the classifier is read in full every token, so it keeps the stored type
  // (a q6_k table is 20 MB where its f32 copy is 98 MB at the stories110M shape) and the lookup keeps its own.
  const DType stored = weights.find("token_embd.weight")->dtype;
  const DType classifier_type = stored == DType::kF32 ? options_.weight_dtype.value_or(stored) : stored;
  if (config_.tied_embeddings && classifier_type == token_embd_.dtype) {
    classifier_ = token_embd_;
    streamed_bytes_ += token_embd_.bytes();
    // The shared table is the classifier's matmul weight too: the device may re-lay it (its lookup still reads it).
    TS_RETURN_IF_ERROR(stream_->synchronize());
    ops::WeightHints hints;
    hints.decode_bound = true;
    TS_RETURN_IF_ERROR(device_.prepare_matmul_weight(classifier_, hints));
  } else if (config_.tied_embeddings) {
    TS_ASSIGN_OR_RETURN(classifier_, upload_matrix(weights, "token_embd.weight", {config_.vocab_size, d}));
  } else {
    TS_ASSIGN_OR_RETURN(classifier_, upload_matrix(weights, "output.weight", {config_.vocab_size, d}));
  }
  for (int l = 0; l < config_.n_layers; ++l) {
    auto name = [l](const char* suffix) { return model::layer_tensor_name(l, suffix); };
    Layer layer;
    layer.head_dim = config_.layer_head_dim(l);
    layer.hidden = config_.layer_hidden_dim(l);
    layer.own_kv = config_.kv_source_layer(l) == l;
    layer.n_kv_heads = config_.layer_n_kv_heads(l);
    const int64_t q = config_.n_heads * layer.head_dim, kv = layer.n_kv_heads * layer.head_dim;
    TS_ASSIGN_OR_RETURN(layer.attn_norm, upload(weights, name("attn_norm.weight"), {d}));
    layer.kind = config_.layer_kind(l);
    if (layer.kind.attention == model::AttentionKind::kLinear) TS_RETURN_IF_ERROR(upload_linear(weights, l, layer));
    if (layer.kind.attention == model::AttentionKind::kFull) {
      // Qwen3.5's query projection gives each head its query and then its output gate.
      TS_ASSIGN_OR_RETURN(layer.wq,
                          upload_matrix(weights, name("attn_q.weight"), {config_.attn_output_gate ? 2 * q : q, d}));
      TS_ASSIGN_OR_RETURN(layer.bq, upload_optional(weights, name("attn_q.bias"), {q}));
      if (layer.own_kv) {  // a gemma4 KV-sharing layer's file may hold K and V projections it never runs
        TS_ASSIGN_OR_RETURN(layer.wk, upload_matrix(weights, name("attn_k.weight"), {kv, d}));
        if (config_.arch == "gemma4" && weights.find(name("attn_v.weight")) == nullptr) {
          layer.wv = layer.wk;  // llama.cpp's gemma4: a layer without v_proj uses K as V (then V is normed alone)
        } else {
          TS_ASSIGN_OR_RETURN(layer.wv, upload_matrix(weights, name("attn_v.weight"), {kv, d}));
        }
        TS_ASSIGN_OR_RETURN(layer.bk, upload_optional(weights, name("attn_k.bias"), {kv}));
        TS_ASSIGN_OR_RETURN(layer.bv, upload_optional(weights, name("attn_v.bias"), {kv}));
      }
      TS_ASSIGN_OR_RETURN(layer.wo, upload_matrix(weights, name("attn_output.weight"), {d, q}));
      TS_ASSIGN_OR_RETURN(layer.bo, upload_optional(weights, name("attn_output.bias"), {d}));
      if (config_.attn_sinks) {
        TS_ASSIGN_OR_RETURN(layer.sinks, upload(weights, name("attn_sinks.weight"), {config_.n_heads}));
      }
      if (config_.qk_norm) {
        TS_ASSIGN_OR_RETURN(layer.q_norm, upload(weights, name("attn_q_norm.weight"), {layer.head_dim}));
        if (layer.own_kv) {
          TS_ASSIGN_OR_RETURN(layer.k_norm, upload(weights, name("attn_k_norm.weight"), {layer.head_dim}));
        }
      }
    }
    TS_ASSIGN_OR_RETURN(layer.ffn_norm, upload(weights, name("ffn_norm.weight"), {d}));
    TS_RETURN_IF_ERROR(upload_ffn(weights, l, layer));
    if (config_.post_norms) {
      TS_ASSIGN_OR_RETURN(layer.post_attn_norm, upload(weights, name("post_attention_norm.weight"), {d}));
      TS_ASSIGN_OR_RETURN(layer.post_ffw_norm, upload(weights, name("post_ffw_norm.weight"), {d}));
    }
    if (config_.per_layer_dim > 0 || config_.layer_output_scale)
      TS_RETURN_IF_ERROR(upload_gemma4_layer(weights, l, layer));
    layer.scores.scale = config_.attn_scale;
    layer.scores.softcap = config_.attn_softcap;
    layer.scores.window = config_.is_sliding_layer(l) ? config_.sliding_window : 0;
    layers_.push_back(layer);
  }
  TS_RETURN_IF_ERROR(setup_rope(weights));
  return stream_->synchronize();
}

Status ModelRunner::setup_rope(const model::ModelWeights& weights) {
  std::vector<std::pair<std::vector<float>, ops::Tensor>> uploaded;
  for (int l = 0; l < config_.n_layers; ++l) {
    TS_ASSIGN_OR_RETURN(model::RopeFrequencies f, model::rope_frequencies(config_, weights, l, config_.max_seq_len));
    if (!config_.rope_sections.empty()) {
      if (!f.inv_freq.empty() || f.mscale != 1.0f)
        return unimplemented("rope scaling together with M-RoPE sections is not supported");
      f.inv_freq = mrope_frequencies();
    }
    Layer& layer = layers_[static_cast<size_t>(l)];
    layer.rope_theta = f.theta;
    layer.rope_mscale = f.mscale;
    if (f.inv_freq.empty()) continue;
    auto same = std::find_if(uploaded.begin(), uploaded.end(), [&](const auto& u) { return u.first == f.inv_freq; });
    if (same != uploaded.end()) {
      layer.rope_freqs = same->second;
      continue;
    }
    TS_ASSIGN_OR_RETURN(ops::Tensor t, alloc(DType::kF32, {static_cast<int64_t>(f.inv_freq.size())}));
    TS_RETURN_IF_ERROR(stream_->upload(t, f.inv_freq.data()));
    layer.rope_freqs = t;
    uploaded.emplace_back(std::move(f.inv_freq), t);
  }
  return ok_status();
}

}  // namespace tessera::engine
