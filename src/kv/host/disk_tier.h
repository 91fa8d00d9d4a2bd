// DiskTier: the host connector's disk tier. Block records (block_file.h) as one file per block under
// <dir>/<store key>/<chain hash>.kvb, where the store key is derived from the model's identity, the block size, the
// KV type and the record format: another model's (or another layout's) files sit in another directory and are
// never read. What the directory holds survives a restart: open() indexes the files already there, least recently
// used first by their modification time (a read hit refreshes it), and removes leftovers of interrupted writes.
// Bounded by capacity_bytes: writing past it deletes the least recently used files.
//
// One I/O thread does every file operation; reads go before writes (a request waits on them). Writes are queued
// (a block waiting to be written is readable from the queue) and, beyond max_pending_bytes, the oldest queued
// write is dropped (counted). Thread-safety: every method may be called from any thread. The destructor finishes
// the queued writes (so that a clean shutdown keeps them) and drops the queued reads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/host/block_file.h"

namespace tessera::kv {

struct DiskTierOptions {
  std::string dir;
  size_t capacity_bytes = 0;
  size_t max_pending_bytes = 256u << 20;
};

// The counters behind the disk tier's stats (cumulative) and what it holds now.
struct DiskTierStats {
  uint64_t blocks = 0, bytes = 0, capacity_bytes = 0;
  uint64_t read_blocks = 0, read_bytes = 0;
  double read_seconds = 0;
  uint64_t written_blocks = 0, written_bytes = 0;
  double write_seconds = 0;
  uint64_t evicted_blocks = 0;  // deleted to stay within capacity
  uint64_t failed_blocks = 0;   // unreadable or corrupt files, deleted
  uint64_t dropped_writes = 0;  // queued writes dropped (queue over its bound)
};

class DiskTier {
 public:
  static Result<std::unique_ptr<DiskTier>> open(DiskTierOptions options, BlockFormat format,
                                                const std::string& identity);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Where this store's files are.
  const std::string& path() const { return path_; }
  // On disk, or queued to be written; `with_state` (when given): whether that record carries the recurrent state
  // after the block (BlockFormat::holds_state).
  bool contains(engine::BlockHash hash, bool* with_state = nullptr) const;
  // Queues `block` to be written (returns at once). A block already here is not written again, unless `block`
  // carries the state and the record here does not (it then replaces it).
  void write(std::shared_ptr<const HostBlock> block);
  // Reads the blocks in order on the I/O thread, stopping at the first missing or corrupt one (a corrupt file is
  // deleted and counted); `done` then gets the blocks read intact, on the I/O thread. Never called when `cancelled`
  // was set first or the tier is shutting down.
  using ReadDone = std::function<void(std::vector<std::shared_ptr<const HostBlock>>)>;
  void read(std::vector<engine::BlockHash> hashes, std::shared_ptr<std::atomic<bool>> cancelled, ReadDone done);
  // Returns once every write queued so far is on disk (or dropped).
  void flush();
  // Publishes the blocks this tier holds now as stored, then every block it takes in or drops (kv_events.h); null:
  // none from now on.
  void set_event_log(engine::KvEventLog* log);
  DiskTierStats stats() const;

 private:
  DiskTier(DiskTierOptions options, BlockFormat format, std::string path);
  struct Read {
    std::vector<engine::BlockHash> hashes;
    std::shared_ptr<std::atomic<bool>> cancelled;
    ReadDone done;
  };
  struct File {
    uint64_t bytes = 0;
    std::list<engine::BlockHash>::iterator lru;
  };
  void run();
  void do_write(const std::shared_ptr<const HostBlock>& block);
  void do_read(Read& r);
  std::string file_of(engine::BlockHash hash) const;
  void index_locked(engine::BlockHash hash, uint64_t bytes);  // as the most recently used (`bytes`: its file's)
  bool file_has_state_locked(const File& f) const {
    return format_.geometry.state_bytes > 0 && f.bytes == kBlockHeaderBytes + format_.payload_bytes(true);
  }
  void forget_locked(engine::BlockHash hash, bool remove_file);  // drops it from the index

  const DiskTierOptions options_;
  const BlockFormat format_;
  const std::string path_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  bool stopping_ = false;                                                            // GUARDED_BY(mu_)
  bool busy_ = false;                                                                // GUARDED_BY(mu_): a task in hand
  std::deque<Read> reads_;                                                           // GUARDED_BY(mu_)
  std::deque<std::shared_ptr<const HostBlock>> writes_;                              // GUARDED_BY(mu_)
  std::unordered_map<engine::BlockHash, std::shared_ptr<const HostBlock>> pending_;  // GUARDED_BY(mu_)
  size_t pending_bytes_ = 0;                                                         // GUARDED_BY(mu_)
  std::list<engine::BlockHash> lru_;                                                 // GUARDED_BY(mu_): front = oldest
  std::unordered_map<engine::BlockHash, File> files_;                                // GUARDED_BY(mu_)
  DiskTierStats stats_;                                                              // GUARDED_BY(mu_)
  engine::KvEventLog* events_ = nullptr;                                             // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace tessera::kv
