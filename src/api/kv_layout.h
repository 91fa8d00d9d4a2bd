// The canonical KV layout: how one request's transferable state crosses a process boundary (the link between a
// prefill and a decode node), whatever layout each side's device keeps. Version 2 names two sections:
//
//   kv     [layer][k|v][position][kv_head][head_dim] in one stated dtype (f32 on the wire today; conversion
//          happens on the receiving side), so position p of layer l is one row of kv_dim values:
//            K rows of layer l:  layer_bytes() * l                 .. + half_bytes()
//            V rows of layer l:  layer_bytes() * l + half_bytes()  .. + half_bytes()
//   state  state_bytes() bytes right after the kv section: the request's recurrent state after its last carried
//          position (hybrid models' linear-attention layers, issue 28: every linear layer's window then state,
//          f32); 0 bytes for attention-only models. For a hybrid model the kv section's layers are its
//          full-attention layers only.
//
// Version 1 (before issue 30) was the kv section alone; the two agree byte for byte when the state is empty, and a
// node states its version in the PD model description (docs/pd-protocol.md), so unlike versions refuse each other.
// A paged cache keeps the kv rows in blocks of block_tokens positions, so a run of positions whose blocks are
// consecutive is one contiguous run of rows on both sides (engine/model_runner.cc copies it in one call).
// Every size in Tessera that describes KV bytes on the wire (the staging reservation, the prefill reply's `bytes`,
// the pd-link connector's checks) is computed here; docs/kv.md describes the host tier's block records.
//
// Thread-safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace tessera::api {

inline constexpr int kKvLayoutVersion = 2;

struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;  // n_kv_heads * head_dim
  DType dtype = DType::kF32;
  int positions = 0;      // positions carried
  size_t state_size = 0;  // bytes of the state section (0: attention-only models)

  // One position of K (or V) of one layer.
  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<size_t>(kv_dim)); }
  // The K (or V) rows of one layer.
  size_t half_bytes() const { return static_cast<size_t>(positions) * row_bytes(); }
  size_t layer_bytes() const { return 2 * half_bytes(); }
  // The kv section.
  size_t kv_bytes() const { return static_cast<size_t>(n_layers) * layer_bytes(); }
  // The state section: where it starts and how long it is.
  size_t state_offset() const { return kv_bytes(); }
  size_t state_bytes() const { return state_size; }
  // Everything carried.
  size_t bytes() const { return kv_bytes() + state_size; }
  // Where the K (V) row of carried position `index` (0 = the first carried) of `layer` starts.
  size_t k_offset(int layer, int index) const {
    return static_cast<size_t>(layer) * layer_bytes() + static_cast<size_t>(index) * row_bytes();
  }
  size_t v_offset(int layer, int index) const { return k_offset(layer, index) + half_bytes(); }
};

}  // namespace tessera::api
