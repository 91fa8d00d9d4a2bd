// KV events: what a node's prefix cache holds, published as it changes, so that a router can route by the blocks
// each node really holds (vLLM's `kv_events`, Dynamo's KV router). A full block registered in the prefix cache is
// `stored` on the device tier; a cached block the cache takes back for other data is `removed` from it; the host
// connector's tiers (kv/host/host_connector.h) publish the same for the blocks they take in and drop, so a block
// moving down the hierarchy is `removed` from one tier and `stored` in the next. Blocks are named by their chain hash
// (engine::BlockManager::chain_hash: XXH3 of the block's int32 token ids seeded with the previous block's hash), the
// same hash the router computes from a prompt's token ids (router::block_chain).
//
// A hybrid model's prefix is of use only up to a block after which some tier keeps the recurrent state (a state
// checkpoint, engine/kv_cache.h): its log says so (`states`), and publishes, beside the blocks, the states each tier
// takes in and drops under the chain hash of the block they follow (the device prefix cache's checkpoints, the
// host connector's records with a state and the states it keeps alone), so that a router counts only what a node
// can use.
//
// The log numbers events 1, 2, 3, ... and keeps the newest `capacity`; a reader asks for what came after the last
// number it saw. A reader that fell behind what is kept, or that read another run of the node (each log has a random
// `epoch`), gets `reset` and the whole set of blocks held now instead, then follows from there: events are replayable
// after a reconnect, and a reader never holds a stale picture for longer than one read.
//
// Thread-safety: thread-safe (the engine thread publishes, HTTP threads read).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace tessera::engine {

enum class KvEventType : uint8_t { kStored, kRemoved };
std::string_view kv_event_name(KvEventType t);
enum class KvTier : uint8_t { kDevice, kHost, kDisk };
inline constexpr int kKvTiers = 3;
std::string_view kv_tier_name(KvTier t);

struct KvEvent {
  uint64_t seq = 0;
  KvEventType type = KvEventType::kStored;
  uint64_t hash = 0;
  KvTier tier = KvTier::kDevice;
  bool state = false;  // the state after block `hash`, not the block
};

struct KvEventRead {
  uint64_t epoch = 0;
  uint64_t last = 0;                     // the newest event's number (0: none yet); ask for what comes after it next
  bool reset = false;                    // `held` replaces what the reader knew; `events` is empty
  std::vector<KvEvent> events;           // after the reader's number, oldest first (at most max_events)
  std::vector<uint64_t> held[kKvTiers];  // reset: every block held now, by tier
  std::vector<uint64_t> held_states[kKvTiers];  // reset: every block after which a state is held now, by tier
  bool states = false;                          // a hybrid model's log (above)
};

class KvEventLog {
 public:
  explicit KvEventLog(size_t capacity = 1 << 16);

  void publish(KvEventType type, uint64_t hash, KvTier tier = KvTier::kDevice);
  // Hybrid models: the state after block `hash` taken in (stored) or dropped (removed) by `tier`.
  void publish_state(KvEventType type, uint64_t hash, KvTier tier);
  // Marks the log a hybrid model's (before any reader; the engine does at start).
  void set_states(bool states) { states_ = states; }
  bool states() const { return states_; }
  // What came after event `after` of run `epoch`; `reset` when that is not in the log any more (or another run).
  // A reader with nothing yet asks with epoch 0.
  KvEventRead read(uint64_t epoch, uint64_t after, size_t max_events = 4096) const;

  uint64_t epoch() const { return epoch_; }
  size_t held(KvTier tier = KvTier::kDevice) const;
  size_t held_states(KvTier tier) const;

 private:
  void publish_locked(KvEventType type, uint64_t hash, KvTier tier, bool state);
  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  std::deque<KvEvent> events_;                          // GUARDED_BY(mu_)
  uint64_t next_ = 1;                                   // GUARDED_BY(mu_)
  std::unordered_set<uint64_t> held_[kKvTiers];         // GUARDED_BY(mu_)
  std::unordered_set<uint64_t> held_states_[kKvTiers];  // GUARDED_BY(mu_)
  std::atomic<bool> states_{false};
};

}  // namespace tessera::engine
