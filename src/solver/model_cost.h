// ModelCost: how much arithmetic and memory traffic one serving step of a decoder-only transformer needs,
// computed once from its ModelConfig. These formulas are the single place the solver (and `tessera bench
// generate`) turns a model's shape into work; the roofline latency model (profile.h) turns work into seconds.
//
// Conventions: a multiply-add is 2 FLOPs. Per token, every weight matrix of every layer is used once
// (2 * parameters FLOPs), attention adds 2 * 2 * q_dim FLOPs per (layer, attended position) for QK^T and
// PV, and the classifier runs only for tokens that are sampled (the last prompt token and every decode
// token). Norms, rotary, softmax and a linear-attention layer's state update are ignored (under 1% of the
// work at the shapes served here).
//
// The 2026 families, layer by layer: a sliding layer attends at most `sliding_window` positions; a layer that
// reuses an earlier layer's K and V (gemma4) holds no cache of its own but still reads its source's; a
// linear-attention layer (qwen35) keeps a recurrent state per sequence instead of K and V (read and written each
// step, shipped with the KV in a prefill -> decode handoff); a mixture-of-experts layer multiplies only the experts
// a token is routed to, and a step of n tokens reads the experts any of them is routed to (uniform routing:
// 1 - (1 - used / experts)^n of them). Lookup tables (an untied token embedding, gemma4's per-layer embeddings)
// are resident but read a row per token, not per step.
//
// Thread-safety: a value.
#pragma once

#include <algorithm>
#include <cstdint>

#include "model/model_config.h"

namespace tessera::solver {

struct ModelCost {
  // per layer, averaged over the layers: the weights one token multiplies (attention or linear-attention
  // projections and the feed-forward; a mixture-of-experts layer its router, the experts one token is routed to
  // and any shared expert or MLP beside them)
  double layer_matmul_params = 0;
  double classifier_params = 0;   // dim * vocab
  double weight_bytes = 0;        // all parameters at the weight dtype (embedding counted once if tied): resident
  double lookup_bytes = 0;        // the part of weight_bytes a step reads a row of (untied embedding, per-layer tables)
  double expert_bytes = 0;        // the part of weight_bytes in routed experts (0 for a dense model)
  double expert_share = 0;        // experts a token is routed to / experts per layer
  double kv_bytes_per_token = 0;  // one position: K and V of every layer that keeps its own (written, shipped)
  // What the cache holds (tessera serve keeps only the sliding layers' windows, docs/kv.md): per position, K and V of
  // the full layers that keep their own (every layer's when the sliding ones keep every position), and per sequence,
  // the sliding layers' own K and V of its last window_held_positions (0: every position counted per position).
  double held_kv_bytes_per_token = 0;
  double sliding_kv_bytes_per_token = 0;
  double window_held_positions = 0;
  // Per attended position, summed over the attention layers of each kind: the query widths (FLOPs) and the K and V
  // bytes read (a KV-sharing layer reads its source's).
  double full_q_dims = 0, sliding_q_dims = 0;
  double full_kv_read_bytes = 0, sliding_kv_read_bytes = 0;
  double sliding_window = 0;  // > 0: positions a sliding layer attends at most
  double state_bytes = 0;     // recurrent state one sequence carries (linear layers), f32
  int n_layers = 0;
  int dim = 0;

  // weight_dtype_bytes: bytes per weight (2 for f16/bf16, 1.0625 for q8_0 ...); kv_dtype_bytes likewise.
  static ModelCost from_config(const model::ModelConfig& c, double weight_dtype_bytes, double kv_dtype_bytes);

  // FLOPs of the transformer body for `tokens` new tokens (no classifier, no attention).
  double linear_flops(double tokens) const { return 2.0 * layer_matmul_params * n_layers * tokens; }
  // FLOPs of the classifier for `sampled` tokens.
  double classifier_flops(double sampled) const { return 2.0 * classifier_params * sampled; }
  // Positions a sliding layer attends for a query that sees `context` (its window, at most).
  double windowed(double context) const;
  // Attention FLOPs for a chunk of `chunk` new tokens appended after `past` cached positions: token i of
  // the chunk attends to past + i + 1 positions (causal; a sliding layer to its window of them).
  double attention_flops(double past, double chunk) const;
  // Attention FLOPs for one decode token whose sequence holds `context` positions (including itself).
  double decode_attention_flops(double context) const;
  // K and V bytes one decode token reads at `context` positions, over every attention layer.
  double decode_kv_read_bytes(double context) const;
  // Weight bytes one step of `tokens` tokens reads: every matrix once, the routed experts any token uses, no table.
  double weight_read_bytes(double tokens) const;
  // Bytes a prefill -> decode handoff of `tokens` positions ships: their K and V and the sequence's state. A decode
  // node that keeps only its windows takes the sliding layers' rows of the window it holds only (api::KvLayout
  // version 3; window_held_positions bounds them).
  double transfer_bytes(double tokens) const {
    if (window_held_positions <= 0) return tokens * kv_bytes_per_token + state_bytes;
    return tokens * held_kv_bytes_per_token + std::min(tokens, window_held_positions) * sliding_kv_bytes_per_token +
           state_bytes;
  }
  // The recurrent state counted in cached positions (capacities are in positions): 0 without linear layers.
  double state_positions() const { return held_bytes() > 0 ? state_bytes / held_bytes() : 0.0; }
  // held_kv_bytes_per_token, or kv_bytes_per_token for a cost set by hand without it.
  double held_bytes() const { return held_kv_bytes_per_token > 0 ? held_kv_bytes_per_token : kv_bytes_per_token; }
  // The cached positions a sequence of `length` positions holds: its own, its sliding layers' window (of at most
  // `length`) and its recurrent state, the last two counted in positions of held_kv_bytes_per_token.
  double held_positions(double length) const;
  // Whole-prompt prefill FLOPs (body + attention + classifier for the last token).
  double prefill_flops(double prompt_tokens) const;
};

// The feed-forward weights one token of `layer` multiplies (a mixture-of-experts layer: its router, the experts the
// token is routed to, and any shared expert or MLP beside them).
double ffn_params(const model::ModelConfig& c, int layer);

// sum over i = 1..chunk of min(past + i, window) (window <= 0: no window): the positions a chunk's tokens attend.
double windowed_positions(double past, double chunk, double window);

}  // namespace tessera::solver
