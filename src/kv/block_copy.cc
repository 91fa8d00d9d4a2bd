#include "kv/block_copy.h"

#include <cstring>

namespace tessera::kv {

Status read_block_records(engine::KvBlockIo& io, const BlockFormat& f, std::span<const engine::BlockId> ids,
                          std::span<uint8_t* const> payloads, LayerRows& rows) {
  const size_t half = f.half(), n = ids.size();
  rows.k.resize(n * half);
  rows.v.resize(n * half);
  for (int l = 0; l < f.geometry.n_layers; ++l) {
    TS_RETURN_IF_ERROR(io.read_blocks(l, ids, rows.k.data(), rows.v.data()));
    for (size_t j = 0; j < n; ++j) {
      std::memcpy(payloads[j] + f.k_offset(l), rows.k.data() + j * half, half);
      std::memcpy(payloads[j] + f.v_offset(l), rows.v.data() + j * half, half);
    }
  }
  return ok_status();
}

Status write_block_layer(engine::KvBlockIo& io, const BlockFormat& f, int layer, std::span<const engine::BlockId> ids,
                         std::span<const uint8_t* const> payloads, LayerRows& rows) {
  const size_t half = f.half(), n = ids.size();
  rows.k.resize(n * half);
  rows.v.resize(n * half);
  for (size_t j = 0; j < n; ++j) {
    std::memcpy(rows.k.data() + j * half, payloads[j] + f.k_offset(layer), half);
    std::memcpy(rows.v.data() + j * half, payloads[j] + f.v_offset(layer), half);
  }
  return io.write_blocks(layer, ids, rows.k.data(), rows.v.data());
}

}  // namespace tessera::kv
