// The pool connector's bookkeeping, as values (no threads, no sockets): where a block lives in the cluster pool,
// how that is written in the control plane, a node's mirror of the whole index, and the slots of its own pool
// region.
//
// Control-plane keys (ctrl/store.h), every one under its owner's lease (kv/pool/pool_connector.h):
//
//   /tessera/kvpool/agents/<agent>                     link::AgentInfo::encode() of the node's pool agent
//   /tessera/kvpool/blocks/<store key>/<hash>/<agent>  "region=R offset=O bytes=B checksum=C[ state=1]"
//
// `state=1`: a hybrid model's state record (kv/host/block_file.h), under <hash> = kv::state_key of its block's.
// <store key> (kv/host/block_file.h: block_store_key) and <hash> (the block's chain hash) are 16 hex digits.
// The agent is part of the key so that two nodes holding the same block never overwrite each other's entry.
// At (region, offset) of that agent sit `bytes` bytes: a block record (block_file.h's header, then the payload,
// whose XXH3-64 is `checksum`).
//
// Thread-safety: PoolIndex is internally synchronised (the watch thread writes, the engine thread reads);
// SlotTable and the functions are not (values, owned by one thread).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "ctrl/store.h"
#include "engine/block_manager.h"

namespace tessera::kv {

inline constexpr std::string_view kPoolPrefix = "/tessera/kvpool/";

// One block in some node's pool region.
struct PoolEntry {
  std::string agent;  // the pool agent holding it (link::AgentInfo::name)
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // the whole record: header and payload
  uint64_t checksum = 0;
  bool state = false;  // a state record (a hybrid model's)
};

std::string pool_agent_key(std::string_view agent);
std::string pool_blocks_prefix(uint64_t store_key);
std::string pool_block_key(uint64_t store_key, engine::BlockHash hash, std::string_view agent);
std::string encode_pool_entry(const PoolEntry& e);

// What a key under kPoolPrefix names.
struct PoolKey {
  enum class Kind { kAgent, kBlock } kind = Kind::kAgent;
  std::string agent;
  uint64_t store_key = 0;
  engine::BlockHash hash = 0;
};
// InvalidArgument for a key that is neither form (a peer's entry is input: checked, never trusted).
Result<PoolKey> parse_pool_key(std::string_view key);
// The entry of a block key's value (agent from the key); InvalidArgument when malformed.
Result<PoolEntry> decode_pool_entry(std::string_view agent, std::string_view value);

// A node's picture of the cluster pool for one store key, fed by a watch on kPoolPrefix (and a range() at start
// and after a broken watch): which agents hold which blocks, and how to reach each agent.
class PoolIndex {
 public:
  PoolIndex(uint64_t store_key, std::string self) : store_key_(store_key), self_(std::move(self)) {}

  // Replaces everything with the entries of a range() over kPoolPrefix.
  void reset(const std::vector<ctrl::KeyValue>& kvs);
  void apply(const std::vector<ctrl::WatchEvent>& events);

  // Where to read `hash` from: this node's own entry first (no link needed), else the first other agent whose
  // AgentInfo is known. nullopt when no one holds it.
  std::optional<PoolEntry> find(engine::BlockHash hash) const;
  // The AgentInfo text a peer published, or NotFound.
  Result<std::string> agent_info(const std::string& agent) const;
  // Every agent with an AgentInfo entry (this node's own included).
  std::vector<std::string> agents() const;

  size_t blocks() const;        // (hash, agent) entries for this store key
  size_t peer_blocks() const;   // ... held by other agents, state records left out
  size_t peer_states() const;   // state records held by other agents
  size_t skipped_keys() const;  // malformed keys and values seen (and ignored)

 private:
  void apply_locked(const ctrl::KeyValue& kv, bool put);
  const uint64_t store_key_;
  const std::string self_;
  mutable std::mutex mu_;
  std::unordered_map<engine::BlockHash, std::map<std::string, PoolEntry>> blocks_;  // GUARDED_BY(mu_)
  std::map<std::string, std::string> agents_;                                       // GUARDED_BY(mu_)
  size_t entries_ = 0, peer_entries_ = 0, peer_states_ = 0, skipped_ = 0;           // GUARDED_BY(mu_)
};

// The fixed-size slots of a node's pool region, least recently used reused first.
class SlotTable {
 public:
  explicit SlotTable(uint32_t slots);

  struct Claim {
    uint32_t slot = 0;
    std::optional<engine::BlockHash> replaced;  // the block that held the slot (its entry must go first)
  };
  // The slot holding `hash`, made the most recently used; nullopt when not held.
  std::optional<uint32_t> touch(engine::BlockHash hash);
  // A slot for `hash` (not held): a free one, else the least recently used. nullopt when the table has no slots.
  std::optional<Claim> claim(engine::BlockHash hash);
  // Frees a slot (its publication failed), for reuse first.
  void release(uint32_t slot);
  // Every (hash, slot) held, for a re-publication under a new lease.
  std::vector<std::pair<engine::BlockHash, uint32_t>> held() const;

  uint32_t slots() const { return slots_; }
  size_t used() const { return map_.size(); }
  uint64_t replaced() const { return replaced_; }

 private:
  const uint32_t slots_;
  std::vector<uint32_t> free_;                             // back: next to use
  std::list<std::pair<engine::BlockHash, uint32_t>> lru_;  // front: least recently used
  std::unordered_map<engine::BlockHash, std::list<std::pair<engine::BlockHash, uint32_t>>::iterator> map_;
  uint64_t replaced_ = 0;
};

}  // namespace tessera::kv
