#include "model/model_writer.h"

#include <filesystem>

#include <fmt/format.h>

#include "model/formats/gguf/gguf_model.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/llama2c/llama2c_checkpoint.h"
#include "model/tokenizer/vocab.h"
#include "model/weight_export.h"

namespace tessera::model {

std::vector<std::string> model_format_names() { return {"llama2c", "gguf", "safetensors"}; }

std::string model_format_for_path(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".gguf") return "gguf";
  if (ext == ".bin") return "llama2c";
  return "safetensors";
}

Status write_model(const std::string& format, const std::string& path, const ModelConfig& config,
                   const ModelWeights& weights, const ModelWriteOptions& o) {
  auto note = [&](std::string s) {
    if (o.notes) o.notes->push_back(std::move(s));
  };
  if (format == "gguf") {
    std::optional<Vocab> vocab;
    if (o.tokenizer) {
      auto v = o.tokenizer->to_vocab();
      if (v.ok()) {
        vocab = std::move(*v);
        if (o.vocab_add_eos) vocab->add_eos = *o.vocab_add_eos;
      } else {
        note(fmt::format("tokenizer not embedded: {}", v.status().message()));
      }
    }
    GgufWriteOptions g;
    g.matrix_dtype = o.dtype;
    g.name = o.name;
    g.chat_template = o.chat_template;
    g.notes = o.notes;
    g.pooling = o.embedding.pooling;
    return write_gguf_model(path, config, weights, vocab ? &*vocab : nullptr, g);
  }
  if (format == "safetensors") {
    if (o.dtype && *o.dtype != DType::kF32 && *o.dtype != DType::kF16 && *o.dtype != DType::kBF16)
      return invalid_argument(fmt::format("safetensors holds f32, f16 or bf16, not {}", dtype_name(*o.dtype)));
    HfWriteOptions h;
    h.dtype = o.dtype;
    h.max_shard_bytes = o.max_shard_bytes;
    h.tokenizer_json = o.tokenizer_json;
    h.tokenizer_config_json = o.tokenizer_config_json;
    h.embedding = o.embedding;
    if (o.tokenizer_json.empty()) note("no tokenizer.json written (the source tokenizer is not a tokenizer.json)");
    return write_hf_model(path, config, weights, h);
  }
  if (format == "llama2c") {
    if (config.arch != "llama" || weights.find("blk.0.attn_q.bias") != nullptr)
      return invalid_argument(
          fmt::format("llama2.c checkpoints hold llama models without biases, not {}", config.arch));
    if (config.rope_scaling.type != RopeScalingType::kNone || weights.find("rope_freqs.weight") != nullptr ||
        config.sliding_window > 0)
      return invalid_argument("llama2.c checkpoints cannot state rope scaling or a sliding window");
    if (o.dtype && *o.dtype != DType::kF32)
      return invalid_argument(fmt::format("llama2.c checkpoints hold f32, not {}", dtype_name(*o.dtype)));
    TS_ASSIGN_OR_RETURN(ExportedWeights ex,
                        export_weights(config, weights, RopeLayout::kInterleaved, DType::kF32, {DType::kF32}));
    auto holder = std::make_shared<ExportedWeights>(std::move(ex));
    ModelWeights view(holder);
    for (const WeightTensor& t : holder->tensors) view.add(t);
    ModelConfig c = config;
    c.rope_layout = RopeLayout::kInterleaved;
    return write_llama2c_checkpoint(path, c, view);
  }
  return invalid_argument(
      fmt::format("unknown format '{}'; known formats: {}", format, fmt::join(model_format_names(), ", ")));
}

}  // namespace tessera::model
