#include "model/weight_export.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/quant.h"
#include "model/bert.h"
#include "model/rope_permute.h"

namespace tessera::model {
namespace {

// Gemma 4 in the order llama.cpp's converter writes it (model/synth_gemma4.cc): per-layer embeddings, the full layers'
// rope_freqs, then per layer attention (attn_v absent where V is K), the dense MLP, the experts beside it, the
// per-layer embedding's gate and projection, the output scale.
std::vector<std::string> gemma4_tensor_names(const ModelConfig& c, const ModelWeights& w) {
  std::vector<std::string> names = {"token_embd.weight"};
  if (c.per_layer_dim > 0)
    names.insert(names.end(),
                 {"per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight"});
  if (w.find("rope_freqs.weight") != nullptr) names.push_back("rope_freqs.weight");
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<const char*> layer = {
        "attn_norm.weight",    "attn_q.weight",      "attn_k.weight",      "attn_v.weight",
        "attn_q_norm.weight",  "attn_k_norm.weight", "attn_output.weight", "post_attention_norm.weight",
        "ffn_norm.weight",     "ffn_gate.weight",    "ffn_up.weight",      "ffn_down.weight",
        "post_ffw_norm.weight"};
    if (c.layer_kind(l).ffn == FfnKind::kMoe) {
      const bool fused = w.find(layer_tensor_name(l, "ffn_gate_up_exps.weight")) != nullptr;
      layer.insert(layer.end(), {"ffn_gate_inp.weight", "ffn_gate_inp.scale", "pre_ffw_norm_2.weight",
                                 "post_ffw_norm_1.weight", "post_ffw_norm_2.weight"});
      if (fused) {
        layer.push_back("ffn_gate_up_exps.weight");
      } else {
        layer.insert(layer.end(), {"ffn_gate_exps.weight", "ffn_up_exps.weight"});
      }
      layer.insert(layer.end(), {"ffn_down_exps.weight", "ffn_down_exps.scale"});
    }
    if (c.per_layer_dim > 0) layer.insert(layer.end(), {"inp_gate.weight", "proj.weight", "post_norm.weight"});
    if (c.layer_output_scale) layer.push_back("layer_output_scale.weight");
    for (const char* s : layer) {
      std::string n = layer_tensor_name(l, s);
      if (std::string_view(s) == "attn_v.weight" && w.find(n) == nullptr) continue;  // V is K (26B-A4B full layers)
      names.push_back(std::move(n));
    }
  }
  names.push_back("output_norm.weight");
  if (!c.tied_embeddings) names.push_back("output.weight");
  return names;
}

}  // namespace

std::vector<std::string> canonical_tensor_names(const ModelConfig& c, const ModelWeights& w) {
  if (c.arch == "bert") return bert_tensor_names(c);
  if (c.arch == "gemma4") return gemma4_tensor_names(c, w);
  std::vector<std::string> names = {"token_embd.weight"};
  for (const char* s : {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"})
    if (w.find(s) != nullptr) names.push_back(s);
  for (int l = 0; l < c.n_layers; ++l) {
    const bool moe = c.layer_kind(l).ffn == FfnKind::kMoe;
    const bool fused_experts = moe && w.find(layer_tensor_name(l, "ffn_gate_up_exps.weight")) != nullptr;
    static const char* const kFull[] = {"attn_norm.weight",   "attn_q.weight",      "attn_q.bias",
                                        "attn_k.weight",      "attn_k.bias",        "attn_v.weight",
                                        "attn_v.bias",        "attn_q_norm.weight", "attn_k_norm.weight",
                                        "attn_output.weight", "attn_output.bias",   "attn_sinks.weight"};
    // Qwen3.5's gated delta-net layers, in llama.cpp's converter's order.
    static const char* const kLinear[] = {
        "attn_norm.weight", "attn_qkv.weight",  "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a",
        "ssm_beta.weight",  "ssm_alpha.weight", "ssm_norm.weight",  "ssm_out.weight"};
    static const char* const kFfn[] = {"post_attention_norm.weight",
                                       "ffn_norm.weight",
                                       "ffn_gate.weight",
                                       "ffn_up.weight",
                                       "ffn_down.weight",
                                       "ffn_gate_inp.weight",
                                       "ffn_gate_inp.bias",
                                       "ffn_gate_up_exps.weight",
                                       "ffn_gate_exps.weight",
                                       "ffn_gate_exps.bias",
                                       "ffn_up_exps.weight",
                                       "ffn_up_exps.bias",
                                       "ffn_down_exps.weight",
                                       "ffn_down_exps.bias",
                                       "ffn_gate_inp_shexp.weight",
                                       "ffn_gate_shexp.weight",
                                       "ffn_up_shexp.weight",
                                       "ffn_down_shexp.weight",
                                       "post_ffw_norm.weight"};
    std::vector<const char*> layer_names;
    if (c.layer_kind(l).attention == AttentionKind::kLinear) {
      layer_names.assign(std::begin(kLinear), std::end(kLinear));
    } else {
      layer_names.assign(std::begin(kFull), std::end(kFull));
    }
    layer_names.insert(layer_names.end(), std::begin(kFfn), std::end(kFfn));
    for (const char* s : layer_names) {
      const std::string_view sv(s);
      if (sv.find("_shexp.") != std::string_view::npos && (!moe || c.moe.shared_expert_hidden_dim == 0)) continue;
      std::string n = layer_tensor_name(l, s);
      if ((sv.ends_with(".bias") || sv == "attn_sinks.weight") && w.find(n) == nullptr) continue;
      if (!c.qk_norm && (sv == "attn_q_norm.weight" || sv == "attn_k_norm.weight")) continue;
      if (!c.post_norms && (sv == "post_attention_norm.weight" || sv == "post_ffw_norm.weight")) continue;
      const bool dense_part = sv == "ffn_gate.weight" || sv == "ffn_up.weight" || sv == "ffn_down.weight";
      const bool expert_part = sv.starts_with("ffn_gate_inp") || sv.find("_exps.") != std::string_view::npos;
      if ((moe && dense_part) || (!moe && expert_part)) continue;
      if (sv == "ffn_gate_up_exps.weight" && !fused_experts) continue;
      if (fused_experts && (sv == "ffn_gate_exps.weight" || sv == "ffn_up_exps.weight")) continue;
      names.push_back(std::move(n));
    }
  }
  names.push_back("output_norm.weight");
  if (!c.tied_embeddings) names.push_back("output.weight");
  return names;
}

Status fuse_rows(ExportedWeights& ex, const std::vector<std::string>& parts, const std::string& fused) {
  std::vector<uint8_t> bytes;
  int64_t rows = 0;
  const WeightTensor* first = nullptr;
  size_t at = ex.tensors.size();
  for (const std::string& p : parts) {
    const WeightTensor* t = nullptr;
    for (size_t i = 0; i < ex.tensors.size(); ++i) {
      if (ex.tensors[i].name != p) continue;
      t = &ex.tensors[i];
      at = std::min(at, i);
    }
    if (first == nullptr) first = t;
    if (t == nullptr || t->dtype != first->dtype || t->shape.size() != 2 || t->shape[1] != first->shape[1])
      return invalid_argument(fmt::format("cannot fuse {} into {}", p, fused));
    bytes.insert(bytes.end(), t->data, t->data + t->bytes);
    rows += t->shape[0];
  }
  WeightTensor f{fused, first->dtype, {rows, first->shape[1]}, nullptr, bytes.size()};
  ex.owned.push_back(std::move(bytes));
  f.data = ex.owned.back().data();
  std::vector<WeightTensor> out;
  for (size_t i = 0; i < ex.tensors.size(); ++i) {
    if (i == at) out.push_back(f);
    if (std::find(parts.begin(), parts.end(), ex.tensors[i].name) == parts.end()) out.push_back(ex.tensors[i]);
  }
  ex.tensors = std::move(out);
  return ok_status();
}

Result<std::vector<float>> tensor_to_f32(const WeightTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (dtype_bytes(t.dtype, out.size()) != t.bytes)
    return invalid_argument(
        fmt::format("tensor {} holds {} bytes, not {} {} values", t.name, t.bytes, out.size(), dtype_name(t.dtype)));
  TS_RETURN_IF_ERROR(dequantize(t.data, t.dtype, out));
  return out;
}

Result<ExportedWeights> export_weights(const ModelConfig& c, const ModelWeights& w, RopeLayout file_layout,
                                       std::optional<DType> matrix_dtype, const std::set<DType>& format_dtypes) {
  TS_RETURN_IF_ERROR(c.validate());
  ExportedWeights out;
  const bool permute = file_layout != c.rope_layout;
  for (const std::string& name : canonical_tensor_names(c, w)) {
    const WeightTensor* src = w.find(name);
    if (src == nullptr) return not_found(fmt::format("the model has no tensor {}", name));
    WeightTensor t = *src;
    if (permute && (name.ends_with("attn_q.weight") || name.ends_with("attn_q.bias") ||
                    name.ends_with("attn_k.weight") || name.ends_with("attn_k.bias"))) {
      bool is_q = name.find("attn_q.") != std::string::npos;
      int heads = is_q ? c.n_heads : c.n_kv_heads;
      int64_t rows = t.shape[0];
      if (rows != static_cast<int64_t>(heads) * c.head_dim)
        return invalid_argument(fmt::format("tensor {} has {} rows, expected {}", name, rows, heads * c.head_dim));
      out.owned.push_back(permute_rope_rows(t.data, rows, t.bytes / static_cast<size_t>(rows), heads,
                                            file_layout == RopeLayout::kInterleaved));
      t.data = out.owned.back().data();
    }
    DType want = t.dtype;
    // Matrices (expert stacks included) take matrix_dtype; biases, norms, the MoE router and Qwen3.5's convolution
    // taps stay as they are, as llama.cpp's converter and llama-quantize keep ffn_gate_inp and ssm_conv1d in f32.
    const bool matrix = t.shape.size() >= 2 && name.ends_with(".weight") && !name.ends_with("ffn_gate_inp.weight") &&
                        !name.ends_with("ssm_conv1d.weight");
    if (matrix && matrix_dtype) want = *matrix_dtype;
    if (t.shape.size() == 1 && want != DType::kF32 && !format_dtypes.count(want)) want = DType::kF32;
    int block = dtype_info(want).block_elems;
    if (t.shape.back() % block != 0) {
      out.notes.push_back(fmt::format("{}: row length {} is not a multiple of {}'s block of {}; stored as f16", name,
                                      t.shape.back(), dtype_name(want), block));
      want = DType::kF16;
    }
    if (!format_dtypes.count(want)) {
      out.notes.push_back(fmt::format("{}: {} cannot be stored in this format; stored as f32", name, dtype_name(want)));
      want = DType::kF32;
    }
    if (want != t.dtype) {
      TS_ASSIGN_OR_RETURN(std::vector<float> f, tensor_to_f32(t));
      std::vector<uint8_t> buf(dtype_bytes(want, f.size()));
      TS_RETURN_IF_ERROR(quantize(f, want, buf.data()));
      out.owned.push_back(std::move(buf));
      t.dtype = want;
      t.data = out.owned.back().data();
      t.bytes = out.owned.back().size();
    }
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace tessera::model
