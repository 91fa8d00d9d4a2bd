// BlockManager: who owns which KV block, and the prefix cache over full blocks.
//
// Blocks are reference-counted so that sequences sharing a prompt prefix share its blocks. A full block
// whose tokens are known is registered under a chain hash (xxhash of its tokens, seeded with the hash of
// the block before it), so a later sequence starting with the same tokens finds it. A registered block
// whose last user leaves is kept as cached-but-evictable; allocation takes truly free blocks first, then
// evicts cached ones least recently used first.
//
// Pure bookkeeping (no device memory, no clock): deterministic and testable alone. Owned by the engine
// thread; not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/kv_events.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

enum class BlockId : int32_t {};
using BlockHash = uint64_t;

// A cached block that allocate() took for new data: `hash` was its content's chain hash.
struct EvictedBlock {
  BlockId id;
  BlockHash hash;
};

struct PrefixCacheStats {
  uint64_t queries = 0;       // match_prefix() calls
  uint64_t query_tokens = 0;  // tokens offered to match_prefix()
  uint64_t hit_tokens = 0;    // tokens found cached
  uint64_t evictions = 0;     // cached blocks reused for other data
};

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_tokens, bool enable_prefix_cache = true);

  int num_blocks() const { return num_blocks_; }
  int block_tokens() const { return block_tokens_; }
  // Blocks an allocation could obtain now (free plus cached-but-unused).
  int available() const { return static_cast<int>(free_.size() + evictable_.size()); }
  int used() const { return num_blocks_ - available(); }
  int cached() const { return static_cast<int>(by_hash_.size()); }
  const PrefixCacheStats& stats() const { return stats_; }

  // A block with reference count 1. ResourceExhausted when none is available.
  Result<BlockId> allocate();
  void retain(BlockId id);
  void release(BlockId id);  // releasing a block nobody holds is a broken invariant
  int ref_count(BlockId id) const { return blocks_[index(id)].refs; }

  // The cached blocks holding the longest prefix of `tokens` made of whole blocks and at most `max_tokens`
  // tokens long; each is retained for the caller.
  std::vector<BlockId> match_prefix(std::span<const model::TokenId> tokens, int max_tokens);
  bool prefix_cache_enabled() const { return prefix_cache_; }
  // Records that `id` holds a full block whose chain hash is `hash`. If another block already holds that
  // content, `id` stays unregistered (and is freed normally).
  void register_full_block(BlockId id, BlockHash hash);
  // Whether a block holds the content whose chain hash is `hash`; that block, retained for the caller (nullopt when
  // none does). KvCache asks these of its sliding layers' pool, whose prefix is only needed over the window.
  bool holds(BlockHash hash) const { return by_hash_.count(hash) > 0; }
  std::optional<BlockId> acquire(BlockHash hash);

  static BlockHash chain_hash(BlockHash parent, std::span<const model::TokenId> block);
  // The chain hashes of the whole blocks of `tokens` (at most max_blocks of them).
  static std::vector<BlockHash> chain_hashes(std::span<const model::TokenId> tokens, int block_tokens,
                                             size_t max_blocks = SIZE_MAX);

  // Publishes every block the prefix cache registers (stored) and every cached block it evicts (removed) to `log`
  // (kv_events.h); null: none. The log must outlive this.
  void set_event_log(KvEventLog* log) { events_ = log; }
  KvEventLog* event_log() const { return events_; }

  // When on, allocate() records each cached block it evicts; take_evicted() hands them over (KvCache).
  void track_evictions(bool on) { track_evictions_ = on; }
  std::vector<EvictedBlock> take_evicted() { return std::exchange(evicted_, {}); }

 private:
  struct Block {
    int refs = 0;
    bool hashed = false;
    BlockHash hash = 0;
    std::list<BlockId>::iterator lru;  // valid while evictable
  };
  size_t index(BlockId id) const;

  int num_blocks_, block_tokens_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> evictable_;  // refs == 0 and hashed; front = least recently used
  std::unordered_map<BlockHash, BlockId> by_hash_;
  PrefixCacheStats stats_;
  bool track_evictions_ = false;
  std::vector<EvictedBlock> evicted_;
  KvEventLog* events_ = nullptr;
};

}  // namespace tessera::engine
