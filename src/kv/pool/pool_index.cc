#include "kv/pool/pool_index.h"

#include <charconv>

#include <fmt/core.h>

namespace tessera::kv {
namespace {

constexpr std::string_view kAgents = "agents/";
constexpr std::string_view kBlocks = "blocks/";

bool parse_hex(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

bool valid_agent(std::string_view a) {
  if (a.empty() || a.size() > 128) return false;
  for (char c : a) {
    if (c == '/' || c == ' ' || c == '=' || static_cast<unsigned char>(c) < 0x21 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

std::string pool_agent_key(std::string_view agent) { return fmt::format("{}{}{}", kPoolPrefix, kAgents, agent); }

std::string pool_blocks_prefix(uint64_t store_key) {
  return fmt::format("{}{}{:016x}/", kPoolPrefix, kBlocks, store_key);
}

std::string pool_block_key(uint64_t store_key, engine::BlockHash hash, std::string_view agent) {
  return fmt::format("{}{:016x}/{}", pool_blocks_prefix(store_key), hash, agent);
}

std::string encode_pool_entry(const PoolEntry& e) {
  return fmt::format("region={} offset={} bytes={} checksum={:016x}{}", e.region, e.offset, e.bytes, e.checksum,
                     e.state ? " state=1" : "");
}

Result<PoolKey> parse_pool_key(std::string_view key) {
  const auto bad = [&] { return invalid_argument(fmt::format("not a KV pool key: '{}'", key.substr(0, 200))); };
  if (!key.starts_with(kPoolPrefix)) return bad();
  key.remove_prefix(kPoolPrefix.size());
  PoolKey k;
  if (key.starts_with(kAgents)) {
    key.remove_prefix(kAgents.size());
    if (!valid_agent(key)) return bad();
    k.kind = PoolKey::Kind::kAgent;
    k.agent = std::string(key);
    return k;
  }
  if (!key.starts_with(kBlocks)) return bad();
  key.remove_prefix(kBlocks.size());
  // <store key>/<hash>/<agent>
  if (key.size() < 34 || key[16] != '/' || key[33] != '/') return bad();
  if (!parse_hex(key.substr(0, 16), &k.store_key) || !parse_hex(key.substr(17, 16), &k.hash)) return bad();
  if (!valid_agent(key.substr(34))) return bad();
  k.kind = PoolKey::Kind::kBlock;
  k.agent = std::string(key.substr(34));
  return k;
}

Result<PoolEntry> decode_pool_entry(std::string_view agent, std::string_view value) {
  PoolEntry e;
  e.agent = std::string(agent);
  int seen = 0;
  while (!value.empty()) {
    const size_t sp = value.find(' ');
    const std::string_view field = value.substr(0, sp);
    value = sp == std::string_view::npos ? std::string_view() : value.substr(sp + 1);
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) return invalid_argument("a KV pool entry field without '='");
    const std::string_view name = field.substr(0, eq), v = field.substr(eq + 1);
    if (name == "state") {
      if (v != "0" && v != "1") return invalid_argument("a KV pool entry's state is not 0 or 1");
      e.state = v == "1";
      continue;
    }
    uint64_t* out = name == "region"     ? &e.region
                    : name == "offset"   ? &e.offset
                    : name == "bytes"    ? &e.bytes
                    : name == "checksum" ? &e.checksum
                                         : nullptr;
    if (out == nullptr) continue;  // a field of a later version
    const int base = name == "checksum" ? 16 : 10;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out, base);
    if (ec != std::errc() || p != v.data() + v.size() || v.empty())
      return invalid_argument(fmt::format("a KV pool entry's {} is not a number", name));
    seen |= name == "region" ? 1 : name == "offset" ? 2 : name == "bytes" ? 4 : 8;
  }
  if (seen != 15) return invalid_argument("a KV pool entry lacks region, offset, bytes or checksum");
  if (e.bytes == 0 || e.offset + e.bytes < e.offset) return invalid_argument("a KV pool entry's range is invalid");
  return e;
}

void PoolIndex::reset(const std::vector<ctrl::KeyValue>& kvs) {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.clear();
  agents_.clear();
  entries_ = peer_entries_ = peer_states_ = 0;
  for (const ctrl::KeyValue& kv : kvs) apply_locked(kv, true);
}

void PoolIndex::apply(const std::vector<ctrl::WatchEvent>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ctrl::WatchEvent& e : events) apply_locked(e.kv, e.type == ctrl::WatchEvent::Type::kPut);
}

void PoolIndex::apply_locked(const ctrl::KeyValue& kv, bool put) {
  auto key = parse_pool_key(kv.key);
  if (!key.ok()) {
    skipped_++;
    return;
  }
  if (key->kind == PoolKey::Kind::kAgent) {
    if (put) {
      agents_[key->agent] = kv.value;
    } else {
      agents_.erase(key->agent);
    }
    return;
  }
  if (key->store_key != store_key_) return;  // another model's or layout's blocks
  auto it = blocks_.find(key->hash);
  const bool had = it != blocks_.end() && it->second.count(key->agent) > 0;
  const bool peer = key->agent != self_;
  if (had) {
    if (peer && it->second.at(key->agent).state) peer_states_--;
    it->second.erase(key->agent);
    entries_--;
    if (peer) peer_entries_--;
    if (it->second.empty()) blocks_.erase(it);
  }
  if (!put) return;
  auto entry = decode_pool_entry(key->agent, kv.value);
  if (!entry.ok()) {
    skipped_++;
    return;
  }
  if (peer && entry->state) peer_states_++;
  blocks_[key->hash][key->agent] = std::move(*entry);
  entries_++;
  if (peer) peer_entries_++;
}

std::optional<PoolEntry> PoolIndex::find(engine::BlockHash hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(hash);
  if (it == blocks_.end()) return std::nullopt;
  if (auto self = it->second.find(self_); self != it->second.end()) return self->second;
  for (const auto& [agent, entry] : it->second) {
    if (agents_.count(agent) > 0) return entry;
  }
  return std::nullopt;
}

Result<std::string> PoolIndex::agent_info(const std::string& agent) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent);
  if (it == agents_.end()) return not_found(fmt::format("KV pool agent '{}' is not in the control plane", agent));
  return it->second;
}

std::vector<std::string> PoolIndex::agents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, info] : agents_) out.push_back(name);
  return out;
}

size_t PoolIndex::blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

size_t PoolIndex::peer_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_entries_ - peer_states_;
}

size_t PoolIndex::peer_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_states_;
}

size_t PoolIndex::skipped_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

SlotTable::SlotTable(uint32_t slots) : slots_(slots) {
  free_.reserve(slots);
  for (uint32_t i = slots; i > 0; --i) free_.push_back(i - 1);  // slot 0 is used first
}

std::optional<uint32_t> SlotTable::touch(engine::BlockHash hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return std::nullopt;
  lru_.splice(lru_.end(), lru_, it->second);
  return it->second->second;
}

std::optional<SlotTable::Claim> SlotTable::claim(engine::BlockHash hash) {
  Claim c;
  if (!free_.empty()) {
    c.slot = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    const auto [old, slot] = lru_.front();
    lru_.pop_front();
    map_.erase(old);
    c.slot = slot;
    c.replaced = old;
    replaced_++;
  } else {
    return std::nullopt;
  }
  lru_.emplace_back(hash, c.slot);
  map_[hash] = std::prev(lru_.end());
  return c;
}

void SlotTable::release(uint32_t slot) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->second != slot) continue;
    map_.erase(it->first);
    lru_.erase(it);
    free_.push_back(slot);
    return;
  }
}

std::vector<std::pair<engine::BlockHash, uint32_t>> SlotTable::held() const {
  return std::vector<std::pair<engine::BlockHash, uint32_t>>(lru_.begin(), lru_.end());
}

}  // namespace tessera::kv
