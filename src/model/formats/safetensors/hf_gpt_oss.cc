#include "model/formats/safetensors/hf_gpt_oss.h"

#include <cstring>
#include <map>

#include <fmt/format.h>

namespace tessera::model::hf {
namespace {

using Json = nlohmann::json;

// out [E, cols, rows] = in [E, rows, cols] transposed per expert, elements of `es` bytes.
std::vector<uint8_t> transpose(const uint8_t* in, int64_t experts, int64_t rows, int64_t cols, size_t es) {
  std::vector<uint8_t> out(static_cast<size_t>(experts * rows * cols) * es);
  for (int64_t e = 0; e < experts; ++e) {
    const uint8_t* src = in + static_cast<size_t>(e * rows * cols) * es;
    uint8_t* dst = out.data() + static_cast<size_t>(e * rows * cols) * es;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(dst + static_cast<size_t>(c * rows + r) * es, src + static_cast<size_t>(r * cols + c) * es, es);
  }
  return out;
}

size_t element_bytes(DType t) {
  return dtype_info(t).block_elems == 1 ? static_cast<size_t>(dtype_info(t).block_bytes) : 0;
}

std::string hf_layer(int l, const char* rest) { return fmt::format("model.layers.{}.{}", l, rest); }

}  // namespace

Status parse_gpt_oss_config(const Json& j, ModelConfig& c, const std::string& name) {
  if (auto q = j.find("quantization_config"); q != j.end() && q->is_object()) {
    const std::string method = q->value("quant_method", std::string("?"));
    return unimplemented(fmt::format(
        "{}: quantization_config {} (experts as MXFP4 blocks in safetensors) is not read; convert the folder to "
        "GGUF with llama.cpp's convert_hf_to_gguf.py, whose MXFP4 experts Tessera runs",
        name, method));
  }
  auto count = [&](std::initializer_list<const char*> keys, int& out) -> Status {
    for (const char* k : keys) {
      auto it = j.find(k);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096)
        return invalid_argument(fmt::format("{}: \"{}\" is not a valid count", name, k));
      out = it->get<int>();
      return ok_status();
    }
    return invalid_argument(fmt::format("{}: GptOssForCausalLM needs \"{}\"", name, *keys.begin()));
  };
  MoeConfig& m = c.moe;
  TS_RETURN_IF_ERROR(count({"num_local_experts"}, m.n_experts));
  TS_RETURN_IF_ERROR(count({"num_experts_per_tok", "experts_per_token"}, m.n_experts_used));
  m.expert_hidden_dim = c.hidden_dim;  // intermediate_size is the experts' width
  const double limit =
      j.contains("swiglu_limit") && j["swiglu_limit"].is_number() ? j["swiglu_limit"].get<double>() : 7.0;
  if (limit != 7.0)
    return unimplemented(
        fmt::format("{}: swiglu_limit {} is not supported (llama.cpp and Tessera use 7)", name, limit));
  if (j.contains("attention_bias") && j["attention_bias"] == false)
    return unimplemented(fmt::format("{}: gpt-oss without attention biases is not supported", name));
  c.set_all_ffn(FfnKind::kMoe);
  return ok_status();
}

Status write_gpt_oss_config(const ModelConfig& c, Json& cfg) {
  const MoeConfig& m = c.moe;
  if (m.gating != ExpertGating::kSoftmaxWeight || m.normalize_weights || m.weights_scale != 1.0f ||
      m.swiglu_limit != 7.0f || m.expert_hidden_dim != c.hidden_dim || !c.attn_sinks)
    return unimplemented("GptOssForCausalLM configs state gpt-oss's own routing, experts and sinks only");
  for (int l = 0; l < c.n_layers; ++l)
    if (c.layer_kind(l).ffn != FfnKind::kMoe) return unimplemented("GptOssForCausalLM has experts in every layer");
  cfg["num_local_experts"] = m.n_experts;
  cfg["num_experts_per_tok"] = m.n_experts_used;
  cfg["experts_per_token"] = m.n_experts_used;
  cfg["swiglu_limit"] = 7.0;
  cfg["attention_bias"] = true;
  Json types = Json::array();
  for (int l = 0; l < c.n_layers; ++l) types.push_back(c.is_sliding_layer(l) ? "sliding_attention" : "full_attention");
  if (c.sliding_window > 0) cfg["layer_types"] = types;
  return ok_status();
}

Status gpt_oss_experts_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                               std::vector<std::vector<uint8_t>>& owned, const std::string& where) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) index[tensors[i].name] = i;
  std::vector<char> drop(tensors.size(), 0);
  std::vector<WeightTensor> made;
  const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim, d = c.dim;
  auto take = [&](const std::string& n, std::vector<int64_t> shape) -> Result<const WeightTensor*> {
    auto it = index.find(n);
    if (it == index.end()) return invalid_argument(fmt::format("{}: tensor {} is missing", where, n));
    const WeightTensor& t = tensors[it->second];
    if (t.shape != shape || element_bytes(t.dtype) == 0)
      return invalid_argument(fmt::format("{}: tensor {} has shape [{}] {}, expected [{}] in f32/f16/bf16", where, n,
                                          fmt::join(t.shape, ", "), dtype_name(t.dtype), fmt::join(shape, ", ")));
    drop[it->second] = 1;
    return &t;
  };
  auto add = [&](const std::string& n, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    owned.push_back(std::move(bytes));
    made.push_back({n, t, std::move(shape), owned.back().data(), owned.back().size()});
  };
  for (int l = 0; l < c.n_layers; ++l) {
    // gate_up [E, dim, 2 ff] -> [E, 2 ff, dim]: rows 2j are gate's row j, rows 2j + 1 up's.
    TS_ASSIGN_OR_RETURN(const WeightTensor* gu, take(layer_tensor_name(l, "ffn_gate_up_exps.weight"), {e, d, 2 * f}));
    const size_t es = element_bytes(gu->dtype);
    std::vector<uint8_t> rows = transpose(gu->data, e, d, 2 * f, es);
    std::vector<uint8_t> gate(rows.size() / 2), up(rows.size() / 2);
    const size_t row_bytes = static_cast<size_t>(d) * es;
    for (int64_t x = 0; x < e; ++x)
      for (int64_t j = 0; j < f; ++j) {
        const size_t at = static_cast<size_t>(x * f + j) * row_bytes,
                     src = static_cast<size_t>(x * 2 * f + 2 * j) * row_bytes;
        std::memcpy(gate.data() + at, rows.data() + src, row_bytes);
        std::memcpy(up.data() + at, rows.data() + src + row_bytes, row_bytes);
      }
    add(layer_tensor_name(l, "ffn_gate_exps.weight"), gu->dtype, {e, f, d}, std::move(gate));
    add(layer_tensor_name(l, "ffn_up_exps.weight"), gu->dtype, {e, f, d}, std::move(up));
    TS_ASSIGN_OR_RETURN(const WeightTensor* down, take(layer_tensor_name(l, "ffn_down_exps.weight"), {e, f, d}));
    add(layer_tensor_name(l, "ffn_down_exps.weight"), down->dtype, {e, d, f},
        transpose(down->data, e, f, d, element_bytes(down->dtype)));
    TS_ASSIGN_OR_RETURN(const WeightTensor* gub, take(hf_layer(l, "mlp.experts.gate_up_proj_bias"), {e, 2 * f}));
    const size_t bs = element_bytes(gub->dtype);
    std::vector<uint8_t> gb(gub->bytes / 2), ub(gub->bytes / 2);
    for (int64_t i = 0; i < e * f; ++i) {
      std::memcpy(gb.data() + static_cast<size_t>(i) * bs, gub->data + static_cast<size_t>(2 * i) * bs, bs);
      std::memcpy(ub.data() + static_cast<size_t>(i) * bs, gub->data + static_cast<size_t>(2 * i + 1) * bs, bs);
    }
    add(layer_tensor_name(l, "ffn_gate_exps.bias"), gub->dtype, {e, f}, std::move(gb));
    add(layer_tensor_name(l, "ffn_up_exps.bias"), gub->dtype, {e, f}, std::move(ub));
    TS_ASSIGN_OR_RETURN(const WeightTensor* db, take(hf_layer(l, "mlp.experts.down_proj_bias"), {e, d}));
    add(layer_tensor_name(l, "ffn_down_exps.bias"), db->dtype, {e, d},
        std::vector<uint8_t>(db->data, db->data + db->bytes));
  }
  std::vector<WeightTensor> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!drop[i]) out.push_back(std::move(tensors[i]));
  for (WeightTensor& t : made) out.push_back(std::move(t));
  tensors = std::move(out);
  return ok_status();
}

Status gpt_oss_experts_to_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                             std::vector<std::vector<uint8_t>>& owned) {
  std::map<std::string, const WeightTensor*> by_name;
  for (const WeightTensor& t : tensors) by_name[t.name] = &t;
  const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim, d = c.dim;
  std::vector<WeightTensor> made;
  auto add = [&](const std::string& n, DType t, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    owned.push_back(std::move(bytes));
    made.push_back({n, t, std::move(shape), owned.back().data(), owned.back().size()});
  };
  auto need = [&](const std::string& n) -> Result<const WeightTensor*> {
    auto it = by_name.find(n);
    if (it == by_name.end() || element_bytes(it->second->dtype) == 0)
      return invalid_argument(fmt::format("gpt-oss HF export: {} is missing or not f32/f16/bf16", n));
    return it->second;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    TS_ASSIGN_OR_RETURN(const WeightTensor* g, need(layer_tensor_name(l, "ffn_gate_exps.weight")));
    TS_ASSIGN_OR_RETURN(const WeightTensor* u, need(layer_tensor_name(l, "ffn_up_exps.weight")));
    TS_ASSIGN_OR_RETURN(const WeightTensor* dn, need(layer_tensor_name(l, "ffn_down_exps.weight")));
    if (g->dtype != u->dtype) return invalid_argument("gpt-oss HF export: gate and up experts differ in type");
    const size_t es = element_bytes(g->dtype), row_bytes = static_cast<size_t>(d) * es;
    std::vector<uint8_t> rows(2 * g->bytes);
    for (int64_t x = 0; x < e; ++x)
      for (int64_t j = 0; j < f; ++j) {
        const size_t at = static_cast<size_t>(x * 2 * f + 2 * j) * row_bytes,
                     src = static_cast<size_t>(x * f + j) * row_bytes;
        std::memcpy(rows.data() + at, g->data + src, row_bytes);
        std::memcpy(rows.data() + at + row_bytes, u->data + src, row_bytes);
      }
    add(hf_layer(l, "mlp.experts.gate_up_proj"), g->dtype, {e, d, 2 * f}, transpose(rows.data(), e, 2 * f, d, es));
    add(hf_layer(l, "mlp.experts.down_proj"), dn->dtype, {e, f, d},
        transpose(dn->data, e, d, f, element_bytes(dn->dtype)));
    TS_ASSIGN_OR_RETURN(const WeightTensor* gb, need(layer_tensor_name(l, "ffn_gate_exps.bias")));
    TS_ASSIGN_OR_RETURN(const WeightTensor* ub, need(layer_tensor_name(l, "ffn_up_exps.bias")));
    TS_ASSIGN_OR_RETURN(const WeightTensor* db, need(layer_tensor_name(l, "ffn_down_exps.bias")));
    const size_t bs = element_bytes(gb->dtype);
    std::vector<uint8_t> gub(2 * gb->bytes);
    for (int64_t i = 0; i < e * f; ++i) {
      std::memcpy(gub.data() + static_cast<size_t>(2 * i) * bs, gb->data + static_cast<size_t>(i) * bs, bs);
      std::memcpy(gub.data() + static_cast<size_t>(2 * i + 1) * bs, ub->data + static_cast<size_t>(i) * bs, bs);
    }
    add(hf_layer(l, "mlp.experts.gate_up_proj_bias"), gb->dtype, {e, 2 * f}, std::move(gub));
    add(hf_layer(l, "mlp.experts.down_proj_bias"), db->dtype, {e, d},
        std::vector<uint8_t>(db->data, db->data + db->bytes));
  }
  std::vector<WeightTensor> out;
  for (WeightTensor& t : tensors)
    if (t.name.find("_exps.") == std::string::npos) out.push_back(std::move(t));
  for (WeightTensor& t : made) out.push_back(std::move(t));
  tensors = std::move(out);
  return ok_status();
}

}  // namespace tessera::model::hf
