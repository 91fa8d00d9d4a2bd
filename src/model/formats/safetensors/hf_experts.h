// Mixture-of-experts layers in Hugging Face folders (internal to the HF reader and writer).
//
// Configs: Qwen3MoeForCausalLM (num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
// decoder_sparse_step, mlp_only_layers: transformers' rule for which layers are sparse) and MixtralForCausalLM
// (num_local_experts, num_experts_per_tok; the experts are intermediate_size wide, weights renormalised).
//
// Tensors: checkpoints keep one matrix per expert (Qwen3-MoE `mlp.experts.E.{gate,up,down}_proj.weight`, router
// `mlp.gate.weight`; Mixtral `block_sparse_moe.experts.E.{w1,w3,w2}.weight`, router `block_sparse_moe.gate.weight`)
// or, as transformers 5 saves them, one stacked tensor (`mlp.experts.gate_up_proj` [E, 2 ff, dim] gate rows first,
// `mlp.experts.down_proj` [E, dim, ff]). The reader stacks per-expert matrices into the engine's 3-D tensors
// (ffn_gate_exps [E, ff, dim], ffn_up_exps, ffn_down_exps [E, dim, ff], or ffn_gate_up_exps), copying them once;
// the writer writes one matrix per expert again (views of the stacked bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model::hf {

// The MoE settings of config.json for c.arch (qwen3moe, or llama from MixtralForCausalLM: `mixtral` true),
// including which layers are sparse. Unimplemented for settings the engine does not compute (shared experts).
Status parse_moe_config(const nlohmann::json& j, bool mixtral, ModelConfig& c, const std::string& name);
// The same keys written back.
Status write_moe_config(const ModelConfig& c, bool mixtral, nlohmann::json& cfg);

// HF name (after "model.layers.N.") of a router or stacked-expert tensor -> the engine's suffix, or "".
std::string expert_tensor_suffix(const std::string& rest);

// Replaces the per-expert matrices among `tensors` (still under their HF names) by the stacked tensors, copies
// kept in `owned`. InvalidArgument naming what is missing or inconsistent.
Status stack_experts(std::vector<WeightTensor>& tensors, const ModelConfig& c, bool mixtral,
                     std::vector<std::vector<uint8_t>>& owned, const std::string& where);

// The HF tensors of one stacked engine tensor `t` of layer `layer` (views of its bytes), named per expert; `t`
// itself (under its HF name) when it is not an expert stack.
std::vector<WeightTensor> unstack_experts(const WeightTensor& t, int layer, const std::string& suffix, bool mixtral);

}  // namespace tessera::model::hf
