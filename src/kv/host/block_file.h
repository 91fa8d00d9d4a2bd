// The host connector's block record: one evicted KV block as it sits in host memory and, byte for byte, in a file
// of the disk tier. The payload is the block's K and V rows of every layer in the cache's own type,
// [layer][k|v][position][kv_dim], followed, for a hybrid model's block after which the device kept a state
// checkpoint, by the recurrent state after the block's last position (engine::KvGeometry::state_bytes; a hybrid
// model's other blocks and every block of an attention-only model have no state section). A file is a 96-byte
// header and the payload:
//
//   magic "TSKVBLK1" | u32 format version | u32 header bytes | u64 store key (model identity + block size + KV
//   type) | u64 chain hash | u32 block_tokens | u32 n_layers | u32 kv_dim | u32 dtype | u64 payload bytes |
//   u64 state bytes | u64 payload checksum (XXH3-64) | u64 header checksum (XXH3-64 of the bytes before it) | pad
//
// A file is read back only when every header field matches what the reader expects and both checksums agree;
// anything else (truncated, corrupted, another model's, another layout) is refused with DataLoss or
// FailedPrecondition, never used.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/kv_connector.h"

namespace tessera::kv {

// One block's KV outside the device. Immutable once made (shared between the pool, loads and the disk writer).
struct HostBlock {
  engine::BlockHash hash = 0;
  std::vector<uint8_t> payload;  // [layer][k|v][position][kv_dim] in the cache's type, then the state section
  uint64_t checksum = 0;         // XXH3-64 of payload
  // No block: the payload is a hybrid model's state after the block whose chain hash is `hash` (a state record:
  // the host connector keeps one that the device prefix cache gave back while it still held the block, the pool
  // keeps states apart from their blocks), kept under kv::state_key(hash).
  bool state_only = false;
};

// What a record must match to be used: the store it belongs to and the cache's shape.
struct BlockFormat {
  uint64_t store_key = 0;
  engine::KvGeometry geometry;
  // A record's payload: the K and V of every layer, and with `state` the state section.
  size_t payload_bytes(bool state = false) const { return geometry.block_bytes() + (state ? geometry.state_bytes : 0); }
  // Whether `b` carries the recurrent state after its last position (a hybrid model's; never an attention-only one's).
  bool holds_state(const HostBlock& b) const {
    return geometry.state_bytes > 0 && b.payload.size() == payload_bytes(true);
  }
  // Offsets of one layer's K and V rows inside a payload, and of the state section.
  size_t k_offset(int layer) const { return 2 * static_cast<size_t>(layer) * half(); }
  size_t v_offset(int layer) const { return k_offset(layer) + half(); }
  size_t state_offset() const { return geometry.block_bytes(); }
  size_t half() const { return static_cast<size_t>(geometry.block_tokens) * geometry.row_bytes(); }
};

inline constexpr size_t kBlockHeaderBytes = 96;

// Where a state kept apart from its block's record sits (HostBlock::state_only): beside the block's key, never equal
// to it.
inline engine::BlockHash state_key(engine::BlockHash hash) { return hash ^ 0x5354415445ull; }  // "STATE"

// The store key of the KV of `model_identity` (kv::model_identity) kept in a cache of geometry `g`: whose KV this
// is and how it is laid out (block size, KV type, layer count, kv_dim, state bytes, the wire layout and record
// versions). The host, disk and pool tiers all key their records by it, so different models never mix.
uint64_t block_store_key(const std::string& model_identity, const engine::KvGeometry& g);

uint64_t payload_checksum(std::span<const uint8_t> payload);
// The header followed by the payload.
std::vector<uint8_t> encode_block_file(const BlockFormat& f, const HostBlock& b);
// The block held by `file` (a whole file's bytes), checked against `f` and `hash`.
Result<std::shared_ptr<const HostBlock>> decode_block_file(const BlockFormat& f, engine::BlockHash hash,
                                                           std::span<const uint8_t> file);
// A state record (HostBlock::state_only): the same header, naming state_key(hash), whose payload is the state alone
// (payload bytes = state bytes = the geometry's). decode_block_file refuses one, and decode_state_record refuses
// a block's record.
std::vector<uint8_t> encode_state_record(const BlockFormat& f, engine::BlockHash hash, std::span<const uint8_t> state);
Result<std::shared_ptr<const HostBlock>> decode_state_record(const BlockFormat& f, engine::BlockHash hash,
                                                             std::span<const uint8_t> file);

}  // namespace tessera::kv
