// The canonical KV layout: how the K and V of a run of positions cross a process boundary, whatever layout
// each side's device keeps. [layer][k|v][position][kv_head][head_dim] in one stated dtype (f32 on the wire
// today; conversion happens on the receiving side), so position p of layer l is one row of kv_dim values:
//
//   K rows of layer l:  layer_bytes() * l                 .. + half_bytes()
//   V rows of layer l:  layer_bytes() * l + half_bytes()  .. + half_bytes()
//
// A paged cache keeps the same rows in blocks of block_tokens positions, so a run of positions whose blocks
// are consecutive is one contiguous run of rows on both sides (engine/model_runner.cc copies it in one call).
// Every size in Tessera that describes KV bytes (the staging reservation, the prefill reply's `bytes`, the
// engine's import check, the cache's block size) is computed here.
//
// Thread-safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace tessera::api {

struct KvLayout {
  int n_layers = 0;
  int kv_dim = 0;  // n_kv_heads * head_dim
  DType dtype = DType::kF32;
  int positions = 0;  // positions carried

  // One position of K (or V) of one layer.
  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<size_t>(kv_dim)); }
  // The K (or V) rows of one layer.
  size_t half_bytes() const { return static_cast<size_t>(positions) * row_bytes(); }
  size_t layer_bytes() const { return 2 * half_bytes(); }
  size_t bytes() const { return static_cast<size_t>(n_layers) * layer_bytes(); }
  // Where the K (V) row of carried position `index` (0 = the first carried) of `layer` starts.
  size_t k_offset(int layer, int index) const {
    return static_cast<size_t>(layer) * layer_bytes() + static_cast<size_t>(index) * row_bytes();
  }
  size_t v_offset(int layer, int index) const { return k_offset(layer, index) + half_bytes(); }
};

}  // namespace tessera::api
