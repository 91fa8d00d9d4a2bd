// Seeded random-weight models of realistic shapes, for speed and format tests without downloading weights.
//
// The same (shape, seed) always gives the same bytes. Weights are N(0, 0.02) (norm weights 1 + N(0, 0.02)),
// so activations stay in a realistic range; the text they generate is, of course, noise. The matching
// tokenizer has llama2.c's special and byte tokens, printable ASCII, then seeded merges.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "model/pooling.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "model/tokenizer/wordpiece_tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

// "tiny" (the stories260K shape, vocab 512), "stories15M", "stories110M", and "qwen2.5-0.5b" (Qwen2.5-0.5B's
// shape: 24 layers, hidden 896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, q/k/v biases, tied
// embeddings, rotate-half rotary). Models of arch "qwen2" get q/k/v biases.
// Family shapes, at their published configs: llama2-7b, llama3.2-1b and llama3.1-8b (llama3 rope scaling),
// mistral-7b (v0.3), smollm2-135m, qwen3-0.6b, gemma2-2b, gemma3-1b, phi3-mini (4k) and phi3-mini-128k
// (longrope, with synthetic factor tensors); mixture-of-experts shapes qwen3-30b-a3b (Qwen3-30B-A3B: 128 experts of
// 768, 8 per token), mixtral-8x7b (8 experts of 14336, 2 per token) and gpt-oss-20b (32 experts of 2880, 4 per
// token, sinks, biases, alternating sliding window, YaRN).
// Embedding shapes: qwen3-embedding-0.6b (Qwen3-Embedding-0.6B: qwen3-0.6b's shape, vocabulary 151669, last-token
// pooling, normalised, matryoshka), bge-small (BAAI/bge-small-en-v1.5: bert, 384 wide, 12 layers, 12 heads, [CLS]
// pooling) and bert-base (bert-base-uncased's shape, 768 wide, mean pooling), both normalised.
Result<ModelConfig> synth_shape(const std::string& name);
// How a shape serves embeddings (none for the generative shapes).
EmbeddingSpec synth_embedding(const std::string& name);
// The same family at test size (dim 64, head_dim 32, 2 kv heads, vocab 512, at most 6 layers and 512
// positions), every feature kept active: sliding windows of 8, rope scaling from a context of 128 (64 for
// longrope, so its long factors apply), 8 experts of hidden_dim with 2 per token for MoE shapes.
Result<ModelConfig> synth_shape_small(const std::string& name);
std::vector<std::string> synth_shape_names();
// Resizes a shape for tests that need other widths (e.g. rows of 256 for K-quant blocks): dim > 0 sets the
// residual width and, keeping head_dim and the grouping of query heads, the head counts (n_heads = dim /
// head_dim); hidden_dim > 0 sets the feed-forward width (an MoE shape's expert width too); sliding_window >= 0
// sets the window (0: none).
// Features that follow the width (gemma's embedding scale) follow it. InvalidArgument for widths the
// heads cannot divide.
Status resize_synth_shape(ModelConfig& c, int dim, int hidden_dim, int sliding_window);

struct SynthModel {
  ModelConfig config;
  ModelWeights weights;  // owns its storage
};

struct SynthWeightOptions {
  // The byte-fallback tokens of synthesize_tokenizer() (ids 3..258) get classifier rows a tenth as large, so
  // they are rarely the most likely token, as in trained models. Greedy text of such a model is then valid
  // UTF-8 (a random model otherwise emits lone high bytes, which llama-server refuses to return).
  bool rare_byte_tokens = false;
  // An untied classifier (output.weight) made of the token embedding plus half as much fresh noise (rescaled):
  // as with tied embeddings, the residual stream's own token then leads the logits by a clear margin, so two
  // engines whose roundings differ (llama.cpp's and Tessera's activation quantisation) rarely part at a near
  // tie. The classifier is still its own tensor (reading token_embd in its place gives other tokens).
  bool decisive = false;
  // > 0: the writes of every layer to the residual stream (attn_output and ffn_down, or with post-norms those
  // norms' weights) are scaled down so that at the classifier the current token's own logit leads the others
  // by about this many standard deviations of theirs (decisive_write_scale() says by how much). Random layers
  // at full width otherwise write 40-60 times the embedding's norm into the residual stream, which leaves the
  // logits a near-uniform draw whose best two are often closer than two engines' roundings (llama.cpp's f16
  // attention accumulators and 8-bit activations, amplified by each quantised product: about 1% of the hidden
  // state at Q8_0/Q4_K_M). The layers still set the other logits, hence every token's probability. An untied
  // classifier needs `decisive` as well to see the token's embedding.
  double token_lead = 0.0;
  // Matrices (not norms, biases or a MoE router) stored as f16 or bf16 from the start: half the memory of f32,
  // for shapes of billions of parameters. nullopt (or f32): f32.
  std::optional<DType> matrix_dtype;
};

// The factor token_lead = `lead` scales each layer's residual writes by (1: none needed), from the shape: the
// current token leads by sqrt(dim) |e| / |h| standard deviations, |e| the input embedding's norm and |h| the
// final hidden state's, and the writes' norms are estimated for N(0, 0.02) weights and rms-normalised inputs.
double decisive_write_scale(const ModelConfig& config, double lead);

SynthModel synthesize_weights(const ModelConfig& config, uint64_t seed, const SynthWeightOptions& options = {});
// `arch` adds the family's marker tokens where llama.cpp looks for them by text: for phi3, Phi-3's added
// tokens (<|endoftext|>, <|assistant|>, <|system|>, <|end|>, <|user|>, placeholders) fill the last 11 ids, as
// in Phi-3's vocabulary after its 32000 SentencePiece pieces (llama.cpp refuses a phi3 vocabulary without
// <|endoftext|>).
std::unique_ptr<Llama2cTokenizer> synthesize_tokenizer(int vocab_size, uint64_t seed, std::string_view arch = "llama");
// A BERT-style uncased WordPiece vocabulary of `vocab_size` (>= 200) tokens: [PAD] [UNK] [CLS] [SEP] [MASK], the
// printable ASCII characters as word starts, letters and digits as "##" continuations, then seeded words and
// continuations of 2 to 8 letters. Every ASCII text tokenizes without [UNK].
std::unique_ptr<WordPieceTokenizer> synthesize_wordpiece_tokenizer(int vocab_size, uint64_t seed);

}  // namespace tessera::model
