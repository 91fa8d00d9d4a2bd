// Gemma 4 in Hugging Face folders (Gemma4ForCausalLM, and the text model of Gemma4ForConditionalGeneration;
// internal to the HF reader and writer).
//
// What transformers writes, as llama.cpp's converter (conversion/gemma.py, Gemma4Model) reads it:
//  - config.json: Gemma4ForConditionalGeneration nests the text model's keys under "text_config" (they win over the
//    top level, as the converter merges them); its vision_config / audio_config and the vision and audio towers'
//    tensors (model.vision_tower.*, model.audio_tower.*, model.embed_vision.*, model.embed_audio.*) are ignored:
//    Tessera serves the text model only. Text tensors are "model.language_model.*" there and "model.*" in
//    Gemma4ForCausalLM. Keys read: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//    num_key_value_heads and head_dim (the sliding layers'), global_head_dim and num_global_key_value_heads (the full
//    layers'; the latter only with attention_k_eq_v, as transformers), layer_types (a repeating run of sliding layers
//    closed by one full layer), sliding_window, rope_parameters.{sliding_attention, full_attention} (rope_theta each;
//    the full layers' "proportional" rope with partial_rotary_factor becomes rope_freqs.weight as the converter
//    writes it: 1 for the rotated pairs, 1e30 for the rest), num_kv_shared_layers, use_double_wide_mlp,
//    hidden_size_per_layer_input, final_logit_softcapping, rms_norm_eps, tie_word_embeddings, and for the MoE
//    (enable_moe_block) num_experts, top_k_experts, moe_intermediate_size.
//  - norms are stored as the multiplier itself (Gemma 4's RMSNorm multiplies by w, unlike Gemma 2 / 3's 1 + w: the
//    converter's norm_shift is 0), so nothing is shifted;
//  - tensors (after "model.layers.N."): input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
//    post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm, mlp.{gate,up,down}_proj,
//    per_layer_input_gate, per_layer_projection, post_per_layer_input_norm, layer_scalar [1]; for the MoE
//    router.proj [E, dim], router.scale [dim], router.per_expert_scale [E], experts.gate_up_proj [E, 2 ff, dim] (gate
//    rows first), experts.down_proj [E, dim, ff], pre_feedforward_layernorm_2, post_feedforward_layernorm_1 / _2;
//    global: embed_tokens, embed_tokens_per_layer [vocab, layers x P], per_layer_model_projection [layers x P, dim],
//    per_layer_projection_norm, norm. Each maps to the GGUF name llama.cpp gives it (blk.N.inp_gate, proj,
//    post_norm, layer_output_scale, ffn_gate_inp(.scale), ffn_down_exps.scale, ffn_gate_up_exps, ...), with the same
//    bytes and shape.
// The writer writes Gemma4ForCausalLM (model_type gemma4_text) with these keys and names.
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

bool is_gemma4_architecture(const std::string& hf_arch);

// The whole config.json (text_config merged in). Unimplemented / InvalidArgument naming the key otherwise.
Result<ModelConfig> parse_gemma4_config(const nlohmann::json& j, const std::string& name);

// HF tensor name -> the engine's (GGUF) name; nullopt for what the text model does not use (vision and audio
// towers, rotary caches). Names it does not know are returned unchanged.
std::optional<std::string> gemma4_gguf_name(const std::string& hf);

// After the names are mapped: the full layers' rope_freqs.weight from config.json, scalars made [1], and the
// attention_k_eq_v promise checked against the tensors (a full layer without v_proj needs it).
Status gemma4_tensors_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c, const std::string& config_json,
                              std::vector<std::vector<uint8_t>>& owned, const std::string& where);

// The config.json of a gemma4 ModelConfig (with `weights` for what only they say: rope_freqs.weight, attn_v in full
// layers) and the HF name of one engine tensor.
Result<nlohmann::json> gemma4_hf_config(const ModelConfig& c, const ModelWeights& weights,
                                        const std::string& torch_dtype);
std::string gemma4_hf_name(const std::string& gguf);

}  // namespace tessera::model::hf
