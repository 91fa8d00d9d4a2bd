#include "kv/host/block_file.h"

#include <xxhash.h>

#include <cstring>

#include <fmt/core.h>

namespace tessera::kv {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr int kRecordFormat = 1;
// The store key's `layout`: a record's rows are laid out as the wire's version 2 was (every layer, every position of
// the block). The wire's later versions (api::kKvLayoutVersion 3: sliding layers' windows only) change nothing
// here, so stores written before them stay readable.
constexpr int kRecordRowsLayout = 2;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t store_key;
  uint64_t hash;
  uint32_t block_tokens;
  uint32_t n_layers;
  uint32_t kv_dim;
  uint32_t dtype;
  uint64_t payload_bytes;
  uint64_t state_bytes;
  uint64_t payload_checksum;
  uint64_t header_checksum;  // of every byte above
  uint8_t pad[kBlockHeaderBytes - 80];
};
static_assert(sizeof(Header) == kBlockHeaderBytes);
constexpr size_t kChecked = offsetof(Header, header_checksum);

Header header_for(const BlockFormat& f, const HostBlock& b) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.header_bytes = kBlockHeaderBytes;
  h.store_key = f.store_key;
  h.hash = b.hash;
  h.block_tokens = static_cast<uint32_t>(f.geometry.block_tokens);
  h.n_layers = static_cast<uint32_t>(f.geometry.n_layers);
  h.kv_dim = static_cast<uint32_t>(f.geometry.kv_dim);
  h.dtype = static_cast<uint32_t>(f.geometry.dtype);
  h.payload_bytes = b.payload.size();
  h.state_bytes = b.state_only || f.holds_state(b) ? f.geometry.state_bytes : 0;
  h.payload_checksum = b.checksum;
  h.header_checksum = XXH3_64bits(&h, kChecked);
  return h;
}

}  // namespace

uint64_t payload_checksum(std::span<const uint8_t> payload) { return XXH3_64bits(payload.data(), payload.size()); }

std::vector<uint8_t> encode_block_file(const BlockFormat& f, const HostBlock& b) {
  const Header h = header_for(f, b);
  std::vector<uint8_t> out(kBlockHeaderBytes + b.payload.size());
  std::memcpy(out.data(), &h, kBlockHeaderBytes);
  std::memcpy(out.data() + kBlockHeaderBytes, b.payload.data(), b.payload.size());
  return out;
}

uint64_t block_store_key(const std::string& model_identity, const engine::KvGeometry& g) {
  const std::string key = fmt::format("{}|block_tokens={}|dtype={}|layers={}|kv_dim={}|state={}|layout={}|record={}",
                                      model_identity, g.block_tokens, dtype_name(g.dtype), g.n_layers, g.kv_dim,
                                      g.state_bytes, kRecordRowsLayout, kRecordFormat);
  return XXH3_64bits(key.data(), key.size());
}

namespace {

// A whole file's record, checked against `f` and the chain hash its header must name; `state_only`: a state record.
Result<std::shared_ptr<const HostBlock>> decode_record(const BlockFormat& f, engine::BlockHash hash,
                                                       std::span<const uint8_t> file, bool state_only) {
  if (file.size() < kBlockHeaderBytes)
    return data_loss(fmt::format("a KV block file of {} bytes is shorter than its header", file.size()));
  Header h;
  std::memcpy(&h, file.data(), kBlockHeaderBytes);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return data_loss("not a KV block file (bad magic)");
  if (h.header_checksum != XXH3_64bits(&h, kChecked)) return data_loss("KV block file header checksum mismatch");
  if (h.version != kFormatVersion || h.header_bytes != kBlockHeaderBytes)
    return failed_precondition(fmt::format("KV block file format {} (this build reads {})", h.version, kFormatVersion));
  const engine::KvGeometry& g = f.geometry;
  const bool payload_fits =
      state_only ? g.state_bytes > 0 && h.state_bytes == g.state_bytes && h.payload_bytes == g.state_bytes
                 : (h.state_bytes == 0 || h.state_bytes == g.state_bytes) &&
                       h.payload_bytes == f.payload_bytes(h.state_bytes != 0);
  if (h.store_key != f.store_key || h.hash != hash || h.block_tokens != static_cast<uint32_t>(g.block_tokens) ||
      h.n_layers != static_cast<uint32_t>(g.n_layers) || h.kv_dim != static_cast<uint32_t>(g.kv_dim) ||
      h.dtype != static_cast<uint32_t>(g.dtype) || !payload_fits) {
    return failed_precondition("the KV block file belongs to another model, block size, KV type or prefix");
  }
  if (file.size() != kBlockHeaderBytes + h.payload_bytes)
    return data_loss(fmt::format("KV block file holds {} payload bytes, its header says {}",
                                 file.size() - kBlockHeaderBytes, h.payload_bytes));
  auto b = std::make_shared<HostBlock>();
  b->hash = hash;
  b->state_only = state_only;
  b->payload.assign(file.begin() + kBlockHeaderBytes, file.end());
  b->checksum = payload_checksum(b->payload);
  if (b->checksum != h.payload_checksum) return data_loss("KV block file payload checksum mismatch");
  return std::shared_ptr<const HostBlock>(std::move(b));
}

}  // namespace

Result<std::shared_ptr<const HostBlock>> decode_block_file(const BlockFormat& f, engine::BlockHash hash,
                                                           std::span<const uint8_t> file) {
  return decode_record(f, hash, file, /*state_only=*/false);
}

std::vector<uint8_t> encode_state_record(const BlockFormat& f, engine::BlockHash hash, std::span<const uint8_t> state) {
  HostBlock b;
  b.hash = state_key(hash);
  b.state_only = true;
  b.payload.assign(state.begin(), state.end());
  b.checksum = payload_checksum(b.payload);
  return encode_block_file(f, b);
}

Result<std::shared_ptr<const HostBlock>> decode_state_record(const BlockFormat& f, engine::BlockHash hash,
                                                             std::span<const uint8_t> file) {
  return decode_record(f, state_key(hash), file, /*state_only=*/true);
}

}  // namespace tessera::kv
