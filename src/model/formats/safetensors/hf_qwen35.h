// Qwen3.5 in Hugging Face folders (qwen35, qwen35moe; internal to the HF reader and writer).
//
// Architectures: Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM (config.json is the text config itself, model_type
// qwen3_5_text / qwen3_5_moe_text; what the writer writes), and Qwen3_5ForConditionalGeneration /
// Qwen3_5MoeForConditionalGeneration (the text config nested under "text_config", tensors under
// "model.language_model."; the vision tower and the multi-token-prediction blocks `mtp.*` are skipped, as the
// engine runs neither). Read as llama.cpp's converter reads them (its Qwen3_5TextModel / Qwen3_5MoeTextModel):
//  - config: layer_types ("linear_attention" / "full_attention"; else every full_attention_interval-th layer is
//    full), linear_{conv_kernel_dim, key_head_dim, value_head_dim, num_key_heads, num_value_heads} (required),
//    rope_parameters (or rope_scaling) with rope_theta, partial_rotary_factor (rotated dimensions = head_dim x it) and
//    mrope_section (padded to 4; [11, 11, 10] when absent); MoE: num_experts, num_experts_per_tok,
//    moe_intermediate_size, shared_expert_intermediate_size;
//  - tensors: every RMSNorm weight but linear_attn.norm is stored as (w - 1) (the engine keeps w); A_log is stored,
//    the engine keeps ssm_a = -exp(A_log); dt_bias is ssm_dt.bias; conv1d.weight [C, 1, K] is ssm_conv1d [C, K] (kept
//    f32); when value heads outnumber key heads, transformers orders them grouped by key head (value head g r + j
//    belongs to key head g) and the engine (as GGUF) tiled (j Hk + g): the V rows of in_proj_qkv, the rows of
//    in_proj_z, in_proj_a, in_proj_b, A_log, dt_bias, the V channels of conv1d and the columns of out_proj are
//    reordered; experts are fused (`mlp.experts.gate_up_proj` [E, 2 ff, dim], gate rows first, `down_proj`
//    [E, dim, ff]) or one matrix per expert; the shared expert is `mlp.shared_expert.*`, its gate
//    `mlp.shared_expert_gate` [1, dim].
// The writer writes the transformers layout back (fused experts, layer_types and full_attention_interval,
// rope_parameters).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model::hf {

bool is_qwen35_architecture(const std::string& hf_arch);
std::vector<std::string> qwen35_architectures();
// What the writer names a qwen35 / qwen35moe model (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM).
const char* qwen35_hf_architecture(const ModelConfig& c);

// The whole config (the generic reader's keys do not apply: nesting, rope_parameters, linear_* keys).
Result<ModelConfig> parse_qwen35_config(const nlohmann::json& j, const std::string& hf_arch, const std::string& name);
// The Qwen3.5 keys written over the generic writer's `cfg` (model_type, rope_parameters, layer_types, linear_*,
// experts); Unimplemented for a config transformers cannot state.
Status write_qwen35_config(const ModelConfig& c, nlohmann::json& cfg);

// The engine's name of a tensor in the folder; nullopt for the ones skipped (mtp.*, the vision tower). Per-expert
// matrices and names it does not know keep their (normalised) HF name; qwen35_from_hf refuses the latter.
std::optional<std::string> qwen35_tensor_name(const std::string& hf);

// `tensors` as read (named by qwen35_tensor_name) turned into the engine's: experts stacked, shapes checked against
// the config (InvalidArgument naming the HF tensor), values and head orders converted; copies kept in `owned`.
Status qwen35_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                      std::vector<std::vector<uint8_t>>& owned, const std::string& where);
// The reverse on exported tensors (f32/f16/bf16): every tensor renamed and converted to transformers' layout.
Status qwen35_to_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c, std::vector<std::vector<uint8_t>>& owned);

}  // namespace tessera::model::hf
