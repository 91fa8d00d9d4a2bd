// Whole KV blocks between the engine's device cache and block records (kv/host/block_file.h: the payload
// [layer][k|v][position][kv_dim] in the cache's type), for the connectors that keep blocks outside the device (host,
// pool). One device copy per run of consecutive block ids per layer, then each block's rows to or from its record.
//
// Thread-safety: engine thread only (KvBlockIo); `rows` is the caller's reusable scratch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/kv_connector.h"
#include "kv/host/block_file.h"

namespace tessera::kv {

// One layer's K and V rows of a run of blocks, reused between calls.
struct LayerRows {
  std::vector<uint8_t> k, v;
};

// The K and V of every layer of device blocks `ids` into `payloads[j]` (each at least f.payload_bytes() long).
Status read_block_records(engine::KvBlockIo& io, const BlockFormat& f, std::span<const engine::BlockId> ids,
                          std::span<uint8_t* const> payloads, LayerRows& rows);
// Layer `layer` of records `payloads` into device blocks `ids` (as many), exact bytes.
Status write_block_layer(engine::KvBlockIo& io, const BlockFormat& f, int layer, std::span<const engine::BlockId> ids,
                         std::span<const uint8_t* const> payloads, LayerRows& rows);

}  // namespace tessera::kv
