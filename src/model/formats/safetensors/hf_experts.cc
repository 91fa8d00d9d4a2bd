#include "model/formats/safetensors/hf_experts.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "model/formats/safetensors/hf_json.h"

namespace tessera::model::hf {
namespace {

using Json = nlohmann::json;

// The per-expert matrix names: {engine suffix, HF projection name}.
struct Proj {
  const char* engine;
  const char* qwen;
  const char* mixtral;
};
constexpr Proj kProjs[] = {{"ffn_gate_exps.weight", "gate_proj", "w1"},
                           {"ffn_up_exps.weight", "up_proj", "w3"},
                           {"ffn_down_exps.weight", "down_proj", "w2"}};

std::string expert_name(int layer, int expert, const Proj& p, bool mixtral) {
  return mixtral ? fmt::format("model.layers.{}.block_sparse_moe.experts.{}.{}.weight", layer, expert, p.mixtral)
                 : fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, expert, p.qwen);
}

}  // namespace

Status parse_moe_config(const Json& j, bool mixtral, ModelConfig& c, const std::string& name) {
  MoeConfig& m = c.moe;
  if (mixtral) {
    TS_ASSIGN_OR_RETURN(m.n_experts, int_key(j, "num_local_experts", 0, name, 1 << 20));
    TS_ASSIGN_OR_RETURN(m.n_experts_used, int_key(j, "num_experts_per_tok", 2, name, 1 << 20));
    m.expert_hidden_dim = c.hidden_dim;
    m.normalize_weights = true;  // transformers' Mixtral divides the top-k weights by their sum
    if (m.n_experts == 0) return invalid_argument(fmt::format("{}: MixtralForCausalLM needs num_local_experts", name));
    c.set_all_ffn(FfnKind::kMoe);
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(m.n_experts, int_key(j, "num_experts", 0, name, 1 << 20));
  TS_ASSIGN_OR_RETURN(m.n_experts_used, int_key(j, "num_experts_per_tok", 0, name, 1 << 20));
  TS_ASSIGN_OR_RETURN(m.expert_hidden_dim, int_key(j, "moe_intermediate_size", 0, name, 1 << 20));
  if (m.n_experts == 0 || m.n_experts_used == 0 || m.expert_hidden_dim == 0)
    return invalid_argument(
        fmt::format("{}: Qwen3MoeForCausalLM needs num_experts, num_experts_per_tok and moe_intermediate_size", name));
  auto norm = j.find("norm_topk_prob");
  m.normalize_weights = norm != j.end() && norm->is_boolean() && norm->get<bool>();  // transformers' default: false
  for (const char* k : {"shared_expert_intermediate_size", "num_shared_experts", "n_shared_experts"}) {
    if (j.contains(k) && !j[k].is_null() && !(j[k].is_number() && j[k].get<double>() == 0))
      return unimplemented(fmt::format("{}: \"{}\" (shared experts) is not supported", name, k));
  }
  TS_ASSIGN_OR_RETURN(int step, int_key(j, "decoder_sparse_step", 1, name, 1 << 20));
  if (step < 1) return invalid_argument(fmt::format("{}: decoder_sparse_step must be >= 1", name));
  std::vector<int> dense_only;
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return invalid_argument(fmt::format("{}: mlp_only_layers is not a list", name));
    for (const Json& v : *it) {
      if (!v.is_number_integer()) return invalid_argument(fmt::format("{}: mlp_only_layers holds a non-integer", name));
      dense_only.push_back(v.get<int>());
    }
  }
  // transformers' Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, every decoder_sparse_step-th layer.
  c.layer_kinds.assign(static_cast<size_t>(c.n_layers), LayerKind{});
  for (int l = 0; l < c.n_layers; ++l) {
    const bool listed = std::find(dense_only.begin(), dense_only.end(), l) != dense_only.end();
    if (!listed && (l + 1) % step == 0) c.layer_kinds[static_cast<size_t>(l)].ffn = FfnKind::kMoe;
  }
  c.compact_layer_kinds();
  return ok_status();
}

Status write_moe_config(const ModelConfig& c, bool mixtral, Json& cfg) {
  const MoeConfig& m = c.moe;
  if (m.gating != ExpertGating::kSoftmax || m.weights_scale != 1.0f)
    return unimplemented(fmt::format("{} configs route by softmax without a weights scale",
                                     mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM"));
  if (mixtral) {
    if (!m.normalize_weights || m.expert_hidden_dim != c.hidden_dim)
      return unimplemented("MixtralForCausalLM renormalises its experts' weights and sizes them intermediate_size");
    for (int l = 0; l < c.n_layers; ++l)
      if (c.layer_kind(l).ffn != FfnKind::kMoe) return unimplemented("MixtralForCausalLM has experts in every layer");
    cfg["num_local_experts"] = m.n_experts;
    cfg["num_experts_per_tok"] = m.n_experts_used;
    cfg["router_jitter_noise"] = 0.0;
    return ok_status();
  }
  cfg["num_experts"] = m.n_experts;
  cfg["num_experts_per_tok"] = m.n_experts_used;
  cfg["moe_intermediate_size"] = m.expert_hidden_dim;
  cfg["norm_topk_prob"] = m.normalize_weights;
  cfg["decoder_sparse_step"] = 1;
  Json dense = Json::array();
  for (int l = 0; l < c.n_layers; ++l)
    if (c.layer_kind(l).ffn != FfnKind::kMoe) dense.push_back(l);
  cfg["mlp_only_layers"] = dense;
  return ok_status();
}

std::string expert_tensor_suffix(const std::string& rest) {
  if (rest == "mlp.gate.weight" || rest == "block_sparse_moe.gate.weight") return "ffn_gate_inp.weight";
  if (rest == "mlp.experts.gate_up_proj" || rest == "mlp.experts.gate_up_proj.weight") return "ffn_gate_up_exps.weight";
  if (rest == "mlp.experts.down_proj" || rest == "mlp.experts.down_proj.weight") return "ffn_down_exps.weight";
  return "";
}

Status stack_experts(std::vector<WeightTensor>& tensors, const ModelConfig& c, bool mixtral,
                     std::vector<std::vector<uint8_t>>& owned, const std::string& where) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) index[tensors[i].name] = i;
  std::vector<char> used(tensors.size(), 0);
  std::vector<WeightTensor> stacked;
  const int experts = c.moe.n_experts;
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.layer_kind(l).ffn != FfnKind::kMoe) continue;
    for (const Proj& p : kProjs) {
      const std::string engine = layer_tensor_name(l, p.engine);
      if (index.count(engine)) continue;  // stored stacked already
      if (std::string_view(p.engine) != "ffn_down_exps.weight" &&
          index.count(layer_tensor_name(l, "ffn_gate_up_exps.weight")))
        continue;  // gate and up come fused
      const WeightTensor* first = nullptr;
      std::vector<const WeightTensor*> parts;
      for (int e = 0; e < experts; ++e) {
        const std::string hf = expert_name(l, e, p, mixtral);
        auto it = index.find(hf);
        if (it == index.end()) return invalid_argument(fmt::format("{}: tensor {} is missing", where, hf));
        const WeightTensor& t = tensors[it->second];
        if (first == nullptr) first = &t;
        if (t.shape.size() != 2 || t.dtype != first->dtype || t.shape != first->shape || t.bytes != first->bytes)
          return invalid_argument(
              fmt::format("{}: expert tensor {} differs in type or shape from expert 0's", where, hf));
        parts.push_back(&t);
        used[it->second] = 1;
      }
      std::vector<uint8_t> bytes(first->bytes * static_cast<size_t>(experts));
      for (int e = 0; e < experts; ++e)
        std::memcpy(bytes.data() + first->bytes * static_cast<size_t>(e), parts[static_cast<size_t>(e)]->data,
                    first->bytes);
      owned.push_back(std::move(bytes));
      stacked.push_back({engine,
                         first->dtype,
                         {experts, first->shape[0], first->shape[1]},
                         owned.back().data(),
                         owned.back().size()});
    }
  }
  std::vector<WeightTensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (used[i]) continue;
    if (tensors[i].name.find(".experts.") != std::string::npos)
      return invalid_argument(
          fmt::format("{}: tensor {} belongs to no expert layer of this config", where, tensors[i].name));
    out.push_back(std::move(tensors[i]));
  }
  for (WeightTensor& t : stacked) out.push_back(std::move(t));
  tensors = std::move(out);
  return ok_status();
}

std::vector<WeightTensor> unstack_experts(const WeightTensor& t, int layer, const std::string& suffix, bool mixtral) {
  for (const Proj& p : kProjs) {
    if (suffix != p.engine || t.shape.size() != 3) continue;
    std::vector<WeightTensor> out;
    const size_t each = t.bytes / static_cast<size_t>(t.shape[0]);
    for (int64_t e = 0; e < t.shape[0]; ++e)
      out.push_back({expert_name(layer, static_cast<int>(e), p, mixtral),
                     t.dtype,
                     {t.shape[1], t.shape[2]},
                     t.data + each * static_cast<size_t>(e),
                     each});
    return out;
  }
  if (suffix == "ffn_gate_inp.weight") {
    WeightTensor r = t;
    r.name = fmt::format("model.layers.{}.{}", layer, mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
    return {r};
  }
  if (suffix == "ffn_gate_up_exps.weight" && t.shape.size() == 3) {
    // Each expert's slice holds its gate rows then its up rows: two contiguous halves.
    std::vector<WeightTensor> out;
    const size_t each = t.bytes / static_cast<size_t>(t.shape[0]), half = each / 2;
    for (int64_t e = 0; e < t.shape[0]; ++e)
      for (int part = 0; part < 2; ++part)
        out.push_back({expert_name(layer, static_cast<int>(e), kProjs[part], mixtral),
                       t.dtype,
                       {t.shape[1] / 2, t.shape[2]},
                       t.data + each * static_cast<size_t>(e) + half * part,
                       half});
    return out;
  }
  return {t};
}

}  // namespace tessera::model::hf
