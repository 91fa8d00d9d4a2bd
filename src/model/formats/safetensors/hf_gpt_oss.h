// gpt-oss in Hugging Face folders (GptOssForCausalLM; internal to the HF reader and writer).
//
// transformers keeps gpt-oss's experts as one tensor per layer and kind, laid out for x @ W: gate_up_proj
// [E, dim, 2 ff] whose columns interleave gate and up (gate = [..., ::2], up = [..., 1::2]), gate_up_proj_bias
// [E, 2 ff] interleaved alike, down_proj [E, ff, dim], down_proj_bias [E, dim]; the router is mlp.router (with a
// bias), the sinks self_attn.sinks. The reader turns these into the engine's ffn_{gate,up,down}_exps (rows of
// outputs, as llama.cpp's converter does) and the writer back. Checkpoints whose experts are MXFP4 blocks in
// safetensors (quantization_config mxfp4, *_blocks / *_scales) are refused by name: convert them to GGUF with
// llama.cpp's converter, whose MXFP4 experts Tessera reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace tessera::model::hf {

Status parse_gpt_oss_config(const nlohmann::json& j, ModelConfig& c, const std::string& name);
Status write_gpt_oss_config(const ModelConfig& c, nlohmann::json& cfg);

// `tensors` as read (engine names where the name tables map them): the experts converted in place, copies kept in
// `owned`.
Status gpt_oss_experts_from_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                               std::vector<std::vector<uint8_t>>& owned, const std::string& where);
// The reverse on exported tensors: the engine's expert tensors replaced by transformers' (named as in the folder).
Status gpt_oss_experts_to_hf(std::vector<WeightTensor>& tensors, const ModelConfig& c,
                             std::vector<std::vector<uint8_t>>& owned);

}  // namespace tessera::model::hf
