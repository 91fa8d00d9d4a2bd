// The host connector: KV blocks the device cache evicts (the block manager's least recently used, cached and
// unreferenced full blocks) move to a bounded host-memory pool, and from there to files on local disk; a later
// request whose prefix hash chain (engine::BlockManager::chain_hash) finds them gets them back instead of
// recomputing them. The hierarchy is LRU at every level: device -> host -> disk -> dropped, and inclusive (a block
// read back from disk stays there and is promoted to host memory; one that is already below is not copied again).
//
//   evicted(blocks)   the blocks' K and V (every layer, the cache's own type: exact bytes) are copied to host
//                     memory before the device overwrites them, one device copy per run of blocks per layer.
//   match             after the device prefix cache: the run of whole blocks that follows it in host memory or on
//                     disk (never the prompt's last position: its logits are needed). All in memory: loaded during
//                     the very step that computes the rest of the prompt, layer by layer before each layer runs.
//                     Some on disk: an asynchronous load; the I/O thread reads and checks the files, and the request
//                     joins the running set with the blocks that arrived intact (a missing or corrupt file ends the
//                     run there: the rest is recomputed, never used).
//   hybrid models     A model with recurrent state (KvGeometry::state_bytes > 0) goes on from a block only with
//                     the state after it. An evicted block after which the device prefix cache keeps a state
//                     checkpoint (KvBlockIo::read_checkpoint) takes that state along in its record; match supplies
//                     the run up to its last block with a state (KvMatch::state), start_load writes that state into
//                     the request's slot, and a disk read that ends early reports the run up to its last block with
//                     a state. A checkpoint the device gives back (its buffer goes to a newer one) is kept here
//                     (checkpoint_evicted): in its block's record when that is here, else alone (host memory only,
//                     under state_key(hash), until its block leaves the device and takes it along); checkpoint(hash)
//                     offers either to the device prefix cache, whose hit may then end at a block it holds.
//   disk tier         kv/host/disk_tier.h: one checksummed file per block, under a directory keyed by the model's
//                     identity, block size and KV type; it survives restarts.
//
// Thread-safety: the KvConnector methods run on the engine thread; stats() anywhere. Its disk tier's I/O thread
// reports through a queue and the engine's wake function.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_copy.h"
#include "kv/host/block_store.h"
#include "kv/host/disk_tier.h"
#include "kv/registry.h"

namespace tessera::kv {

inline constexpr std::string_view kHostConnector = "host";

struct HostOptions {
  size_t host_bytes = 0;                       // the host-memory tier (--kv-host-memory)
  std::string disk_dir;                        // the disk tier (--kv-disk-dir); empty: none
  size_t disk_bytes = 0;                       // its capacity (--kv-disk-size)
  size_t max_pending_disk_bytes = 256u << 20;  // writes queued for the disk beyond this are dropped
};

class HostConnector final : public engine::KvConnector {
 public:
  // `model_identity` (model_identity()) keys the disk tier.
  static Result<std::shared_ptr<HostConnector>> create(HostOptions options, std::string model_identity);
  ~HostConnector() override;

  // The disk tier, or null.
  DiskTier* disk() { return disk_.get(); }
  const HostPool& pool() const { return pool_; }

  std::string_view name() const override { return kHostConnector; }
  Status attach(engine::KvBlockIo& io, std::function<void()> wake) override;
  // Publishes the host tier's blocks taken in and dropped, and (through it) the disk tier's (kv_events.h).
  void set_event_log(engine::KvEventLog* log) override;
  engine::KvMatch match(const engine::KvRequestView& request, int supplied) override;
  void allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks, int first,
                 int count) override;
  engine::KvPoll poll() override;
  bool finished(engine::RequestId id, engine::KvEnd end) override;
  void evicted(std::span<const engine::EvictedBlock> blocks) override;
  void checkpoint_evicted(engine::BlockHash hash, std::span<const std::byte> state) override;
  std::shared_ptr<const uint8_t> checkpoint(engine::BlockHash hash) override;
  Status start_load(std::span<const engine::RequestId> ids) override;
  Status wait_layer_load(int layer) override;
  engine::KvConnectorStats stats() const override;

 private:
  HostConnector(HostOptions options, std::string identity)
      : options_(std::move(options)), identity_(std::move(identity)), pool_(options_.host_bytes) {}
  struct Load {
    engine::RequestId id = 0;
    std::vector<engine::BlockId> device;                   // the blocks to fill, in position order
    std::vector<engine::BlockHash> hashes;                 // their chain hashes
    std::vector<std::shared_ptr<const HostBlock>> blocks;  // their records (null: not here yet)
    std::vector<bool> from_disk;
    bool ready = false;                    // every record is here (or the disk read ended)
    int arrived = 0;                       // leading blocks whose records are here
    std::shared_ptr<const uint8_t> state;  // a hybrid model's: the state after the last of them (settle())
    std::shared_ptr<std::atomic<bool>> cancelled;
  };
  // A hybrid model's load ends at its last arrived block with the state after it, in its record or kept alone (the
  // rest is computed); `state` points at it.
  void settle(Load& load);
  // A block's record in host memory (never a state kept alone), or null.
  std::shared_ptr<const HostBlock> find_block(engine::BlockHash hash, bool touch);
  // The state after block `hash` that the device gave back while it still held the block, kept alone, or null.
  std::shared_ptr<const uint8_t> spilled_state(engine::BlockHash hash);
  // Keeps `block` in host memory; what that pushes out goes to the disk tier (or is dropped).
  void keep(std::shared_ptr<const HostBlock> block);

  const HostOptions options_;
  const std::string identity_;
  engine::KvBlockIo* io_ = nullptr;
  std::function<void()> wake_;
  BlockFormat format_;
  HostPool pool_;
  std::atomic<engine::KvEventLog*> events_{nullptr};  // the engine's KV event log (set_event_log), or none
  std::unordered_map<engine::RequestId, std::shared_ptr<Load>> loads_;  // engine thread
  std::vector<std::shared_ptr<Load>> loading_now_;
  LayerRows rows_;                        // a layer's rows of the blocks being moved, reused
  std::vector<std::byte> state_scratch_;  // evicted(): a hybrid model's checkpoint read for a leaving block, reused
  std::mutex done_mu_;
  std::vector<std::pair<std::shared_ptr<Load>, std::vector<std::shared_ptr<const HostBlock>>>> done_;  // GUARDED_BY

  // Counters for stats() (written on the engine thread).
  struct Counters {
    std::atomic<uint64_t> host_hit_tokens{0}, disk_hit_tokens{0}, host_load_bytes{0}, host_save_bytes{0};
    std::atomic<uint64_t> host_evicted{0};
    std::atomic<uint64_t> states_alone{0};  // hybrid models: states kept alone in the host pool (HostBlock::state_only)
    std::atomic<double> host_load_seconds{0}, host_save_seconds{0};
  } counters_;
  // Last: destroyed first, while everything its I/O thread's callbacks touch still exists.
  std::unique_ptr<DiskTier> disk_;
};

// The registry's factory (options: HostOptions).
Result<std::shared_ptr<engine::KvConnector>> make_host_connector(const ConnectorSpec& spec);

}  // namespace tessera::kv
