// Seeded random-weight models of realistic shapes, for speed and format tests without downloading weights.
//
// The same (shape, seed) always gives the same bytes. Weights are N(0, 0.02) (norm weights 1 + N(0, 0.02)),
// so activations stay in a realistic range; the text they generate is, of course, noise. The matching
// tokenizer has llama2.c's special and byte tokens, printable ASCII, then seeded merges.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

// "tiny" (the stories260K shape, vocab 512), "stories15M", "stories110M", and "qwen2.5-0.5b" (Qwen2.5-0.5B's
// shape: 24 layers, hidden 896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, q/k/v biases, tied
// embeddings, rotate-half rotary). Models of arch "qwen2" get q/k/v biases.
Result<ModelConfig> synth_shape(const std::string& name);
std::vector<std::string> synth_shape_names();

struct SynthModel {
  ModelConfig config;
  ModelWeights weights;  // owns its storage
};

SynthModel synthesize_weights(const ModelConfig& config, uint64_t seed);
std::unique_ptr<Llama2cTokenizer> synthesize_tokenizer(int vocab_size, uint64_t seed);

}  // namespace tessera::model
