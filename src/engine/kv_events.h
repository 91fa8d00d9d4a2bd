// KV events: what a node's prefix cache holds, published as it changes, so that a router can route by the blocks
// each node really holds (vLLM's `kv_events`, Dynamo's KV router). A full block registered in the prefix cache is
// `stored`; a cached block the cache takes back for other data is `removed`. Blocks are named by their chain hash
// (engine::BlockManager::chain_hash: XXH3 of the block's int32 token ids seeded with the previous block's hash), the
// same hash the router computes from a prompt's token ids (router::block_chain).
//
// The log numbers events 1, 2, 3, ... and keeps the newest `capacity`; a reader asks for what came after the last
// number it saw. A reader that fell behind what is kept, or that read another run of the node (each log has a random
// `epoch`), gets `reset` and the whole set of blocks held now instead, then follows from there: events are replayable
// after a reconnect, and a reader never holds a stale picture for longer than one read.
//
// Thread-safety: thread-safe (the engine thread publishes, HTTP threads read).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace tessera::engine {

enum class KvEventType : uint8_t { kStored, kRemoved };
std::string_view kv_event_name(KvEventType t);

struct KvEvent {
  uint64_t seq = 0;
  KvEventType type = KvEventType::kStored;
  uint64_t hash = 0;
};

struct KvEventRead {
  uint64_t epoch = 0;
  uint64_t last = 0;            // the newest event's number (0: none yet); ask for what comes after it next
  bool reset = false;           // `held` replaces what the reader knew; `events` is empty
  std::vector<KvEvent> events;  // after the reader's number, oldest first (at most max_events)
  std::vector<uint64_t> held;   // reset: every block held now
};

class KvEventLog {
 public:
  explicit KvEventLog(size_t capacity = 1 << 16);

  void publish(KvEventType type, uint64_t hash);
  // What came after event `after` of run `epoch`; `reset` when that is not in the log any more (or another run).
  // A reader with nothing yet asks with epoch 0.
  KvEventRead read(uint64_t epoch, uint64_t after, size_t max_events = 4096) const;

  uint64_t epoch() const { return epoch_; }
  size_t held() const;

 private:
  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  std::deque<KvEvent> events_;         // GUARDED_BY(mu_)
  uint64_t next_ = 1;                  // GUARDED_BY(mu_)
  std::unordered_set<uint64_t> held_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::engine
