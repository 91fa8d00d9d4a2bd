// Seeded random-weight Gemma 4 models (GGUF arch `gemma4`), written the way llama.cpp's converter writes
// Gemma 4 checkpoints, so that llama.cpp loads them: the shapes of the dense E2B (per-layer embeddings, the last
// layers reusing earlier layers' KV, sliding layers with head size 256 and full layers with 512, a double-wide MLP
// in the KV-sharing layers) and of the mixture-of-experts 26B-A4B (128 experts of 704, 8 per token, beside a
// dense "shared" MLP; full layers with 2 KV heads whose V is their K).
//
// Tessera computes both layouts on ref and cpu (docs/models.md, "Gemma 4"); the files are the fixtures of that
// forward against llama.cpp (loading, quantizing, greedy parity) and of the tokenizer (tokenizer.ggml.model
// `gemma4`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "model/tokenizer/vocab.h"

namespace tessera::model {

struct Gemma4Shape {
  std::string name;
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads_swa = 0, n_kv_heads_full = 0;
  int head_dim_swa = 0, head_dim_full = 0;
  int hidden_dim = 0;               // the dense MLP (in MoE layers: the MLP beside the experts)
  bool double_wide_shared = false;  // layers that reuse KV have an MLP twice as wide (E2B)
  int per_layer_dim = 0;            // width of the per-layer embeddings; 0: none
  int shared_kv_layers = 0;         // the last this many layers reuse the KV of earlier layers
  double shared_kv_share = 0.0;     // the published shape's share of them, which resizing keeps
  int sliding_window = 0;
  int swa_period = 0;  // layer l attends fully when l % swa_period == swa_period - 1, else slides
  int vocab_size = 0;
  int max_seq_len = 0;
  bool full_k_eq_v = false;  // full layers have no attn_v: V is K (26B-A4B, 31B)
  int n_experts = 0, n_experts_used = 0, expert_hidden_dim = 0;
  float rope_theta_full = 1e6f, rope_theta_swa = 1e4f;
  float partial_rotary_full = 0.25f;  // the rotated fraction of a full layer's head (rope_freqs.weight)
  float final_softcap = 30.0f;
  float norm_eps = 1e-6f;

  bool is_sliding(int layer) const { return layer % swa_period != swa_period - 1; }
  bool has_kv(int layer) const { return layer < n_layers - shared_kv_layers; }
  int ffn_width(int layer) const { return double_wide_shared && !has_kv(layer) ? 2 * hidden_dim : hidden_dim; }
  Status validate() const;
};

std::vector<std::string> gemma4_shape_names();  // "gemma4-e2b", "gemma4-26b-a4b"
bool is_gemma4_shape(const std::string& name);
// The published shape, or at test size (`small`: dim 64, 2 heads, head sizes 32 (sliding) and 64 (full), vocab
// 512, at most 6 layers, window 8, per-layer embeddings of 16, 8 experts of 128 with 2 per token).
Result<Gemma4Shape> gemma4_shape(const std::string& name, bool small);
// Sets the layer count (> 0), keeping the layer pattern and the published share of KV-sharing layers (at least one
// full period of layers keeps its own KV, and the sharing starts at a period's first layer, so that the layers before
// it are the sliding and the full layer llama.cpp's gemma4 KV cache has the sharing layers read); dim / hidden_dim (>
// 0) as `tessera synth --dim/--hidden-dim`: heads follow dim at the shape's sliding head size; sliding_window >= 0 sets
// the window.
Status resize_gemma4_shape(Gemma4Shape& s, int layers, int dim, int hidden_dim, int sliding_window);

// A Gemma 4 style vocabulary of `n` tokens: <pad> <eos> <bos> <unk> <|turn> <turn|> (ids 0-5), the 256 byte
// tokens <0x00>..<0xFF>, printable ASCII with U+2581 for the space, then seeded merges of earlier pieces.
Vocab synthesize_gemma4_vocab(int n, uint64_t seed);

struct Gemma4WriteOptions {
  DType matrix_dtype = DType::kF32;  // f32, f16 or bf16 (norms, scales and the router stay f32)
  bool rare_byte_tokens = false;     // the byte tokens' classifier rows a tenth as large (valid UTF-8 text)
  // The norms after attention, the MLP and the per-layer projection at `post_norm_scale` of their random values: the
  // residual stream then leans on the token embedding, and the tied classifier has clearer winners than the
  // near-uniform logits of a deep random model (whose near ties two engines' roundings tip differently).
  float post_norm_scale = 1.0f;
  // The query norms at `q_norm_scale`: with gemma4's attention scale of 1, random norms of 1 give scores of about
  // sqrt(head size) spread, an attention so sharp that any rounding moves it; a quarter makes it as soft as a
  // 1/sqrt(head_dim) scale would.
  float q_norm_scale = 1.0f;
  // The MoE router (ffn_gate_inp.weight) at `router_scale` of its random values: gemma4's router reads
  // rms_norm(x) / sqrt(dim), so random weights of 0.02 give logits within about 0.02 of each other, an expert choice
  // that any rounding reorders; 2 sqrt(dim) spreads them as a router reading the normed x directly would.
  float router_scale = 1.0f;
  std::string chat_template;  // tokenizer.chat_template when not empty
};
Status write_gemma4_gguf(const Gemma4Shape& shape, uint64_t seed, const Gemma4WriteOptions& options,
                         const std::string& path);

}  // namespace tessera::model
