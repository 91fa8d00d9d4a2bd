// The pool connector: a KV pool shared by the nodes of one control plane. Each node gives a region of host memory
// (--kv-pool-memory) to a link agent of its own; the blocks its device cache evicts are copied into fixed-size
// slots of that region and announced in the control plane (kv/pool/pool_index.h for the keys) under the node's
// leases. Every node mirrors the index through a watch, so that a request whose next prefix blocks another node
// (or this one) holds is loaded from there instead of being computed.
//
//   evicted(blocks)   (engine thread) the blocks' K and V of every layer are copied out (one device copy per run
//                     per layer) and queued for the publisher thread, which puts each into a slot (least recently
//                     published reused first: the slot's old key is removed from the control plane before its
//                     bytes are overwritten) as a block record (kv/host/block_file.h: header with the store key and
//                     the chain hash, payload, XXH3-64) and puts its key. What the queue cannot hold is dropped.
//   match             (engine thread) after the device cache and the connectors before this one: the run of whole
//                     blocks that follows in the local mirror of the index (never the prompt's last position), as
//                     an asynchronous, cached match. No control-plane round trip.
//   allocated         the run goes to the fetch thread (which, while idle, connects to every peer that publishes,
//                     so that a load does not pay the link handshake): a link read of each record from its holder (a
//                     plain copy for this node's own slots) into a staging region, then the record's header (store key,
//                     chain hash, geometry) and checksum are checked. The first block that cannot be read (its node
//                     is gone, the read fails or times out) or is not intact ends the run there: poll() reports the
//                     blocks before it, and the engine computes the rest. Nothing unchecked is ever used.
//   wait_layer_load   copies each layer's rows of the arrived blocks into the cache (KvBlockIo::write_blocks).
//
// Hybrid models (KvGeometry::state_bytes > 0): a prefix is of use only with the recurrent state after its last
// position, so the pool keeps states too, apart from their blocks: half of the region is state slots, each a state
// record (kv/host/block_file.h: the state alone, under kv::state_key(hash)) published as an entry under that key.
// A device state checkpoint goes into one when its block leaves the device (KvBlockIo::read_checkpoint) or when the
// device gives it back (checkpoint_evicted). match() then ends the run at its last block whose state some node
// holds (KvMatch::state); the fetch reads that state after the blocks, and a load whose blocks or state did not all
// arrive intact brings nothing (the prompt is computed from the device's prefix).
//
// Leases: a node's entries live under leases of `lease_ttl` (one per 1000 slots: the embedded store bounds keys per
// lease) renewed every third of it; a node that dies stops renewing and its entries vanish within the TTL. A lease
// the store forgot is granted again and its entries written again.
//
// Threads: the publisher (leases, slots, puts and removes, index resyncs), the fetcher (link reads), the store's
// watch thread (the mirror). Thread-safety: the KvConnector methods run on the engine thread; stats() anywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/cluster_token.h"
#include "ctrl/store.h"
#include "kv/block_copy.h"
#include "kv/host/block_file.h"
#include "kv/pool/pool_index.h"
#include "kv/registry.h"
#include "link/agent.h"

namespace tessera::kv {

inline constexpr std::string_view kPoolConnector = "pool";

struct PoolOptions {
  size_t pool_bytes = 0;               // this node's share of the pool (--kv-pool-memory)
  std::shared_ptr<ctrl::Store> store;  // the control plane every node of the pool uses (--ctrl)
  std::chrono::milliseconds lease_ttl{3000};
  std::vector<std::string> endpoints = {"shm", "tcp"};  // the pool agent's link endpoints
  std::string host = "127.0.0.1";                       // where its tcp endpoint listens
  std::string agent_name;                               // default: derived from the process id
  ClusterToken cluster_token;                           // proven at link connection set-up
  size_t max_pending_bytes = 64u << 20;                 // evicted blocks waiting for a slot beyond this are dropped
  std::chrono::milliseconds read_timeout{2000};         // one run's link reads; a slower peer ends the run
  uint32_t staging_slots = 32;                          // records read per batch
  // Test fault (TESSERA_KV_POOL_CORRUPT=1 in `tessera serve`): one payload byte of every published slot is flipped
  // after its checksum was taken, as memory corruption would; readers must detect it.
  bool corrupt_slots = false;
};

class PoolConnector final : public engine::KvConnector {
 public:
  static Result<std::shared_ptr<PoolConnector>> create(PoolOptions options, std::string model_identity);
  ~PoolConnector() override;

  const std::string& agent_name() const { return agent_->name(); }
  // Blocks other nodes publish that this node sees, and the blocks of its own slots.
  size_t peer_blocks() const { return index_ ? index_->peer_blocks() : 0; }
  // State records (hybrid models) other nodes publish that this node sees.
  size_t peer_states() const { return index_ ? index_->peer_states() : 0; }
  // Every entry of this model this node's mirror of the index holds: its own and its peers', blocks and states.
  size_t indexed_entries() const { return index_ ? index_->blocks() : 0; }
  // Where this node's mirror says `key` (a chain hash, or kv::state_key of one) is read from (PoolIndex::find).
  std::optional<PoolEntry> indexed(engine::BlockHash key) const { return index_ ? index_->find(key) : std::nullopt; }

  std::string_view name() const override { return kPoolConnector; }
  // Registers the pool region, grants the leases, publishes the agent and starts the watch and the threads.
  Status attach(engine::KvBlockIo& io, std::function<void()> wake) override;
  engine::KvMatch match(const engine::KvRequestView& request, int supplied) override;
  void allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks, int first,
                 int count) override;
  engine::KvPoll poll() override;
  bool finished(engine::RequestId id, engine::KvEnd end) override;
  void evicted(std::span<const engine::EvictedBlock> blocks) override;
  void checkpoint_evicted(engine::BlockHash hash, std::span<const std::byte> state) override;
  // The state after block `hash` from this node's own state slots (a plain copy, checked as a load's), so that a
  // device prefix hit may end at a block whose checkpoint the device gave back; null when its own slots lack it (a
  // peer's state comes with a load, never on the engine thread's call).
  std::shared_ptr<const uint8_t> checkpoint(engine::BlockHash hash) override;
  Status start_load(std::span<const engine::RequestId> ids) override;
  Status wait_layer_load(int layer) override;
  engine::KvConnectorStats stats() const override;

 private:
  PoolConnector(PoolOptions options, std::string identity)
      : options_(std::move(options)), identity_(std::move(identity)) {}
  struct Load {
    engine::RequestId id = 0;
    std::vector<engine::BlockId> device;                   // the blocks to fill, in position order
    std::vector<engine::BlockHash> hashes;                 // their chain hashes
    std::vector<PoolEntry> entries;                        // where each was found at match time
    std::vector<std::shared_ptr<const HostBlock>> blocks;  // the records that arrived intact (fetch thread)
    // Hybrid models: where the state after the last block was found at allocation, and its record once it arrived
    // intact (fetch thread).
    std::optional<PoolEntry> state_entry;
    std::shared_ptr<const HostBlock> state;
    int arrived = 0;  // leading blocks that arrived intact (engine thread); a hybrid model's only with the state
    bool ready = false;
    std::atomic<bool> cancelled{false};
  };
  struct Pending {
    engine::BlockHash hash = 0;  // the block's chain hash
    std::vector<uint8_t> payload;
    bool state = false;  // the payload is the state after the block (a state record), not the block
  };

  void publisher_loop();
  void fetcher_loop();
  // Publisher thread: a slot for one block, its record written, its key put.
  void publish(Pending block);
  // Engine thread: records for the publisher (what the queue cannot hold is dropped, oldest first).
  void queue(std::vector<Pending> out);
  // Publisher thread: renews every lease; one the store forgot is granted again and its keys put again.
  void renew_leases();
  // The entry of the record in slot `slot` of the block (state) slots, under the key `key` (state_key(hash) for a
  // state).
  Status put_slot_key(engine::BlockHash key, bool state, uint32_t slot);
  size_t slot_offset(bool state, uint32_t slot) const;
  size_t lease_of(bool state, uint32_t slot) const;
  // Whether this node's own slots hold `key` (a block's chain hash, or state_key of one), as its mirror says.
  bool held_here(engine::BlockHash key) const;
  bool hybrid() const { return format_.geometry.state_bytes > 0; }
  // Fetcher thread: the state record of `load.state_entry` (after its blocks arrived); false when it did not.
  bool fetch_state(Load& load, std::set<std::string>& broken);
  Status resync_index();
  // Fetcher thread: the records of `load`, in order, up to the first that cannot be read or is not intact.
  void fetch(Load& load);
  Status ensure_connected(const std::string& agent);
  // Fetcher thread, while no load waits: connects to the peers not connected yet.
  void connect_peers();

  const PoolOptions options_;
  const std::string identity_;
  engine::KvBlockIo* io_ = nullptr;
  std::function<void()> wake_;
  BlockFormat format_;
  size_t slot_bytes_ = 0;
  size_t state_slot_bytes_ = 0;  // hybrid models: a state record's slot (after the block slots in the region)
  uint32_t block_slots_ = 0;
  std::unique_ptr<link::Agent> agent_;
  link::RegionId region_{}, staging_{};
  std::span<std::byte> region_bytes_, staging_bytes_;
  std::unique_ptr<PoolIndex> index_;
  std::unique_ptr<ctrl::Watch> watch_;
  std::atomic<bool> resync_{false};

  // Publisher state.
  std::mutex pub_mu_;
  std::condition_variable pub_cv_;
  std::deque<Pending> pending_;             // GUARDED_BY(pub_mu_)
  size_t pending_bytes_ = 0;                // GUARDED_BY(pub_mu_)
  bool stop_ = false;                       // GUARDED_BY(pub_mu_), and fetch_mu_'s stop below
  std::unique_ptr<SlotTable> slots_;        // publisher thread
  std::unique_ptr<SlotTable> state_slots_;  // publisher thread; keys are state_key(hash); null unless hybrid
  std::vector<ctrl::LeaseId> leases_;       // publisher thread (attach before it starts); one per kSlotsPerLease slots
  std::unordered_map<engine::BlockHash, uint64_t> slot_checksums_;  // publisher thread, by key

  // Fetcher state.
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  std::deque<std::shared_ptr<Load>> fetch_queue_;  // GUARDED_BY(fetch_mu_)
  bool fetch_stop_ = false;                        // GUARDED_BY(fetch_mu_)
  std::mutex done_mu_;
  std::vector<std::shared_ptr<Load>> done_;  // GUARDED_BY(done_mu_)

  // Engine thread.
  std::unordered_map<engine::RequestId, std::shared_ptr<Load>> loads_;
  std::vector<std::shared_ptr<Load>> loading_now_;
  LayerRows rows_;                      // a layer's rows of the blocks being moved, reused
  std::vector<uint8_t> state_scratch_;  // a checkpoint read out, reused

  struct Counters {
    std::atomic<uint64_t> hit_tokens{0}, load_bytes{0}, save_bytes{0}, evicted{0}, failed{0}, dropped{0};
    std::atomic<uint64_t> used_slots{0}, used_state_slots{0};
    std::atomic<double> load_seconds{0}, save_seconds{0};
  } counters_;
  std::thread publisher_, fetcher_;
};

// The registry's factory (options: PoolOptions).
Result<std::shared_ptr<engine::KvConnector>> make_pool_connector(const ConnectorSpec& spec);

}  // namespace tessera::kv
