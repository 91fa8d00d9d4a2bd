// The canonical KV layout: how one request's transferable state crosses a process boundary (the link between a
// prefill and a decode node), whatever layout each side's device keeps. Version 3 names two sections:
//
//   kv     [layer][k|v][position][kv_head][head_dim] in one stated dtype (the receiving cache's own: the sender
//          converts, kv_wire_dtype), so a carried position of layer l is one row of that layer's n_kv_heads *
//          head_dim values (`widths`; gemma4's sliding layers are narrower than its full ones):
//            K rows of layer l:  layer_offset(l)                  .. + half_bytes(l)
//            V rows of layer l:  layer_offset(l) + half_bytes(l)  .. + half_bytes(l)
//          A layer carries every position sent, except that a sliding-window layer (`sliding`) carries only the
//          last `window_positions` of them when the receiving cache keeps only its windows: the rows its window
//          will read, which on a long prompt are a small part of the rest.
//   state  state_bytes() bytes right after the kv section: the request's recurrent state after its last carried
//          position (hybrid models' linear-attention layers, issue 28: every linear layer's window then state,
//          f32); 0 bytes for attention-only models. For a hybrid model the kv section's layers are its
//          full-attention layers only.
//
// Version 2 (issue 30) was version 3 with every layer carrying every position (window_positions -1) in rows of the
// widest layer's width (a narrower layer's values first, zeros after), version 1 the kv section alone. A node states
// its version in the PD model description (docs/pd-protocol.md), so unlike versions refuse each other. A paged cache
// keeps the kv rows in blocks of block_tokens positions, so a run of positions whose blocks are consecutive is one
// contiguous run of rows on both sides (engine/model_runner.cc copies it in one call). Every size in Tessera that
// describes KV bytes on the wire (the staging reservation, the prefill reply's `bytes`, the pd-link connector's checks)
// is computed here; docs/kv.md describes the host tier's block records.
//
// Thread-safety: a value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/dtype.h"

namespace tessera::api {

inline constexpr int kKvLayoutVersion = 3;

// The element types a row may have on the wire: the KV cache types (docs/kv.md), f32, f16, bf16, q8_0 and q4_0. A
// decode node asks for its own cache's type. The prefill node converts its cache's rows through f32 into it (as the
// decode node would convert f32 rows on arrival), so the rows land in the decode cache as they would from f32 (f32
// holds every value of the others exactly; the quantisers are base/quant.h's on both sides), except that a
// quantised cache of the same type on both sides now receives the prefill node's own blocks. The rows take 34/128
// (q8_0) or 18/128 (q4_0) of f32's bytes; a 16-bit cache's take half.
inline constexpr bool kv_wire_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kQ8_0 || d == DType::kQ4_0;
}

struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;  // n_kv_heads * head_dim
  DType dtype = DType::kF32;
  int positions = 0;      // positions sent
  size_t state_size = 0;  // bytes of the state section (0: attention-only models)
  // Per layer, 1 for a sliding-window layer (both sides read it off the model); those carry only their last
  // window_positions positions when it is >= 0 (at most `positions`). Empty or -1: every layer carries every one.
  std::vector<uint8_t> sliding = {};
  int window_positions = -1;
  // Per layer, its row width in values when the layers differ (gemma4's sliding layers are narrower); empty: kv_dim.
  std::vector<int> widths = {};

  // The positions layer `layer` carries: the last carried(layer) of those sent.
  int carried(int layer) const {
    const bool windowed = window_positions >= 0 && layer >= 0 && static_cast<size_t>(layer) < sliding.size() &&
                          sliding[static_cast<size_t>(layer)] != 0;
    return windowed ? std::min(window_positions, positions) : positions;
  }
  // The index (0 = the first position sent) of the first position layer `layer` carries.
  int first_carried(int layer) const { return positions - carried(layer); }
  // One position of K (or V) of one layer (without an argument: kv_dim values, the widest).
  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<size_t>(kv_dim)); }
  size_t row_bytes(int layer) const {
    const bool own = layer >= 0 && static_cast<size_t>(layer) < widths.size();
    return own ? dtype_bytes(dtype, static_cast<size_t>(widths[static_cast<size_t>(layer)])) : row_bytes();
  }
  // The K (or V) rows of one layer.
  size_t half_bytes(int layer) const { return static_cast<size_t>(carried(layer)) * row_bytes(layer); }
  // Where layer `layer`'s K rows start (layer n_layers: the end of the kv section).
  size_t layer_offset(int layer) const {
    if ((window_positions < 0 || sliding.empty()) && widths.empty())
      return static_cast<size_t>(layer) * 2 * static_cast<size_t>(positions) * row_bytes();
    size_t at = 0;
    for (int l = 0; l < layer; ++l) at += 2 * half_bytes(l);
    return at;
  }
  // The kv section.
  size_t kv_bytes() const { return layer_offset(n_layers); }
  // The state section: where it starts and how long it is.
  size_t state_offset() const { return kv_bytes(); }
  size_t state_bytes() const { return state_size; }
  // Everything carried.
  size_t bytes() const { return kv_bytes() + state_size; }
  // Where the K (V) row of sent position `index` (0 = the first sent; at least first_carried(layer)) of `layer`
  // starts.
  size_t k_offset(int layer, int index) const {
    return layer_offset(layer) + static_cast<size_t>(index - first_carried(layer)) * row_bytes(layer);
  }
  size_t v_offset(int layer, int index) const { return k_offset(layer, index) + half_bytes(layer); }
};

}  // namespace tessera::api
