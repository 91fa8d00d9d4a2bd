// The bert family's names: its GGUF tensors (llama.cpp's converter's names) and its Hugging Face checkpoints
// (BertModel and the BertFor* heads: config.json keys and tensor names, with or without the "bert." prefix and
// with old LayerNorm.gamma/beta spellings).
//
// GGUF                              Hugging Face
// token_embd.weight                 embeddings.word_embeddings.weight
// position_embd.weight              embeddings.position_embeddings.weight
// token_types.weight                embeddings.token_type_embeddings.weight
// token_embd_norm.{weight,bias}     embeddings.LayerNorm.{weight,bias}
// blk.N.attn_{q,k,v}.{weight,bias}  encoder.layer.N.attention.self.{query,key,value}.{weight,bias}
// blk.N.attn_output.{weight,bias}   encoder.layer.N.attention.output.dense.{weight,bias}
// blk.N.attn_output_norm.*          encoder.layer.N.attention.output.LayerNorm.*
// blk.N.ffn_up.{weight,bias}        encoder.layer.N.intermediate.dense.{weight,bias}
// blk.N.ffn_down.{weight,bias}      encoder.layer.N.output.dense.{weight,bias}
// blk.N.layer_output_norm.*         encoder.layer.N.output.LayerNorm.*
// The pooler (pooler.dense), the masked-LM head (cls.*) and position_ids are not used (as llama.cpp drops them).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"

namespace tessera::model {

// Every tensor of a bert model, in the order files are written.
std::vector<std::string> bert_tensor_names(const ModelConfig& c);

bool is_bert_hf_architecture(std::string_view hf_arch);  // BertModel, BertForMaskedLM, ...
// The engine's (GGUF) name of a Hugging Face bert tensor; nullopt for the tensors the engine does not use;
// the name unchanged when it is not a bert name (the loader then reports it missing or ignores it).
std::optional<std::string> bert_gguf_name(const std::string& hf);
std::string bert_hf_name(const std::string& gguf);

// config.json of a BertModel: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// max_position_embeddings, vocab_size, type_vocab_size, layer_norm_eps; hidden_act gelu and
// position_embedding_type absolute (anything else is Unimplemented, naming it).
Result<ModelConfig> parse_bert_hf_config(std::string_view config_json, const std::string& name);
// The config.json a BertModel folder holds for `c`; torch_dtype as given.
std::string bert_hf_config_json(const ModelConfig& c, std::string_view torch_dtype);

}  // namespace tessera::model
