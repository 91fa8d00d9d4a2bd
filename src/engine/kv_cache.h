// The paged KV cache: per-layer K and V tensors of fixed-size blocks, the BlockManager that hands them
// out, and the per-sequence block tables that map positions to blocks; beside it, for hybrid models (Qwen3.5's
// linear-attention layers), a fixed number of recurrent-state slots, one per running sequence: each holds every
// linear layer's convolution window and delta-rule state. Only full-attention layers have K and V.
//
// Sliding-window layers (Gemma 2-4, gpt-oss, Mistral v0.1, Phi-3) read only the last `sliding_window` positions.
// When the window is shorter than the context, their K and V live in blocks of a second pool with a block table of
// its own (SequenceKv::window_blocks, indexed like `blocks`): a sequence holds only the blocks its window still
// reads, and gives each back once every position in it has left the window (vLLM's hybrid KV cache manager and
// llama.cpp's SWA cache do the same). Full layers keep every position as before. The prefix cache registers a
// full block in both pools; a prefix is reused up to a point whose window blocks are still cached.
//
// A hybrid model's prefix is reused through state checkpoints: the recurrent state of a prompt at the last block
// boundary before its last token (and where it parted from another cached prompt, and where its request says later
// prompts will part from it: a chat's system prompt), copied to host memory as the linear layers pass that position
// (ModelRunner), under the chain hash of the block that ends there. A later prompt starting with those blocks takes
// their K and V from the prefix cache and the state from the checkpoint (SGLang's and vLLM's hybrid prefix caches keep
// states at chosen boundaries too; llama.cpp's server keeps context checkpoints near a prompt's end). A fixed number of
// them, least recently used given back first; with a second level (set_checkpoint_spill: the host KV tier) the ones
// given back go there, and a prefix may end at a block whose state only that level keeps.
//
// Past its prompt's end a sequence also keeps a *running* checkpoint: the state at the last block boundary its steps
// (its reply's decode) have crossed, each replacing the one before in the same buffer, so that the next turn of a
// conversation (this prompt, the reply, a new message) goes on from the reply as it does for an attention-only model
// (llama.cpp's server keeps its slot's live state). Running checkpoints of live sequences hold at most half the
// checkpoints (the prompts' ones keep the rest) and none is given back while its sequence lives; when the sequence
// ends its last one stays, as any other, paired with its prompt's end checkpoint (which moves to the back of the LRU
// order once the reply's is taken), if the reply comes back as the tokens it was generated as (a chat's next turn
// sends the reply's text, which may tokenize otherwise: the engine takes none for a reply whose text does not
// tokenize back, and end_reply gives one back); the next turn goes on from one of the two and keeps its own further
// on, so a prompt restoring either moves both to the back: what stays is each conversation's latest state and the
// states prompts share. Beyond half the checkpoints a running one takes only an empty one or one moved back.
//
// KvCache owns device memory. BlockManager and SequenceKv are plain values (no device access), so the
// bookkeeping is testable on its own. Thread-safety: owned by the engine thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/block_manager.h"
#include "model/model_config.h"
#include "ops/backend.h"

namespace tessera::engine {

// The KV state of one sequence: how many positions are cached, in which blocks.
struct SequenceKv {
  std::vector<BlockId> blocks;  // block table (BlockId is an int32 enum: the runner uploads it as an i32 tensor)
  // A windowed cache (KvCache::windowed()): the sliding layers' blocks, as many entries as `blocks`, kNoBlock for a
  // block that has left the window (or, after a prefix hit, was never needed). Empty otherwise.
  std::vector<BlockId> window_blocks;
  int32_t length = 0;       // positions whose K and V are in the cache
  int32_t state_slot = -1;  // hybrid models: the recurrent-state slot this sequence holds (-1: none)
  // A prefix hit of a hybrid model: the state checkpoint (KvCache) its slot takes before its next step, held for it
  // until then (-1: none).
  int32_t restore_checkpoint = -1;
  // ... or the state a second level keeps for it (KvCache::set_checkpoint_spill: a KV connector's host memory), held
  // here until then (null: none).
  std::shared_ptr<const uint8_t> restore_state;
  // Hybrid models: the running state checkpoint this sequence took last (KvCache::running_checkpoint_buffer; 0:
  // none); its next one replaces it, and it is the sequence's until release().
  BlockHash running_checkpoint = 0;
  int32_t running_position = 0;  // ... after this many positions
};

inline constexpr BlockId kNoBlock{-1};

// The most state checkpoints one sequence takes in one step (Scheduler::chunk's positions: the parting point, the
// request's hint, the prompt's end, and past it the running one).
inline constexpr size_t kMaxStepCheckpoints = 4;

struct KvCacheOptions {
  int block_tokens = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;
  bool prefix_cache = true;
  // Hybrid models: recurrent-state slots (sequences that can run at once). 0: one per num_blocks / blocks of a full
  // context is not known here, so the runner sets it (RunnerOptions::max_sequences, or serve's --max-num-seqs).
  int state_slots = 0;
  // Sliding-window layers keep only their windows, in a pool of window_blocks blocks (0: the runner sizes it,
  // window_pool_blocks()), when the model's window is shorter than its context. Off: they keep every position in
  // the full layers' blocks, which is what KV connectors (tiers, pool, prefill/decode hand-off) need, since they
  // move every layer's rows of a block.
  bool window_kv = true;
  int window_blocks = 0;
  // Hybrid models: recurrent states kept in host memory at prompts' last block boundaries, through which prefix reuse
  // works (0: prefix reuse is off for a hybrid model, whatever prefix_cache says).
  int state_checkpoints = 0;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(ops::Device& device, const model::ModelConfig& config,
                                                 const KvCacheOptions& options);

  int block_tokens() const { return options_.block_tokens; }
  int num_blocks() const { return options_.num_blocks; }
  // Device bytes of one block over every layer that holds K and V in these blocks (a KV-sharing layer holds none;
  // a windowed cache's sliding layers are in window_bytes_per_block()).
  size_t bytes_per_block() const { return bytes_per_block_; }
  // A full-attention layer's K and V, [num_blocks, block_tokens, its KV heads, its head size]; an invalid (empty)
  // tensor for a linear-attention layer, which has none; for a gemma4 KV-sharing layer, its source layer's.
  const ops::Tensor& k(int layer) const { return k_[static_cast<size_t>(layer)]; }
  const ops::Tensor& v(int layer) const { return v_[static_cast<size_t>(layer)]; }
  BlockManager& blocks() { return blocks_; }

  // Whether the sliding layers keep only their windows (KvCacheOptions::window_kv, and a window shorter than the
  // context), and whether layer `layer`'s K and V are in that pool (it or its gemma4 source layer slides).
  bool windowed() const { return window_ > 0; }
  bool windowed_layer(int layer) const { return window_ > 0 && windowed_[static_cast<size_t>(layer)]; }
  int window() const { return window_; }
  // The sliding layers' pool (no blocks when not windowed) and the device bytes of one of its blocks.
  BlockManager& window_pool() { return window_pool_; }
  const BlockManager& window_pool() const { return window_pool_; }
  size_t window_bytes_per_block() const { return window_bytes_per_block_; }
  // K (or V) elements one position holds over the layers that keep K and V and slide (`sliding`) or not.
  static int64_t kv_width(const model::ModelConfig& config, bool sliding);
  // Window blocks enough for `sequences` sequences between steps (the window before each one's next position) and
  // for the steps' growth (at most `step_tokens` positions in all, one block each more for a partial one); 0 for a
  // model whose sliding layers would gain nothing (none keep K and V, or the window is not shorter than the context).
  static int window_pool_blocks(const model::ModelConfig& config, int block_tokens, int sequences, int step_tokens);

  // Recurrent state (hybrid models). A linear layer's convolution window [K - 1, channels] and delta-rule state
  // [v_heads, S, S] in `slot`, f32.
  bool has_state() const { return state_slots_ > 0; }
  int state_slots() const { return state_slots_; }
  int free_state_slots() const { return static_cast<int>(free_slots_.size()); }
  size_t state_bytes_per_slot() const { return state_bytes_; }
  ops::Tensor conv_state(int layer, int slot) const;
  ops::Tensor recurrent_state(int layer, int slot) const;

  // State checkpoints (hybrid models; see above). How many may be kept, and how many hold a state now.
  int state_checkpoints() const { return static_cast<int>(checkpoints_.size()); }
  int state_checkpoints_held() const;
  // A host buffer of state_bytes_per_slot() bytes for the state after the block whose chain hash is `hash` (the least
  // recently used unheld checkpoint's, or a free one's); it counts only once checkpoint_written() says it is whole.
  // Null when there is none to give (no checkpoints, or every one is held for a restore) or `hash` is kept already.
  // While it is being filled (until checkpoint_written) no other hash takes it; `whole`: the step that filled it ran
  // to its end (else it is given back empty).
  uint8_t* checkpoint_buffer(BlockHash hash);
  // The same for seq's running checkpoint (see above) after the block whose chain hash is `hash`: the buffer of the
  // one seq took before (given back without going to the second level: this one goes further), else an unheld one
  // (beyond half the checkpoints running, only an empty one or one moved back); null otherwise, and when `hash` is
  // kept already (the same tokens ran before: seq's own is given back). `prompt_end` (0: none): the chain hash of
  // the block ending where seq's prompt's end checkpoint is, its pair (see above), which moves to the back of the
  // LRU order now (the next turn goes on from the reply).
  uint8_t* running_checkpoint_buffer(SequenceKv& seq, BlockHash hash, int32_t position, BlockHash prompt_end);
  // seq's reply has ended (before release): `comes_back` says whether the next turn will carry the reply as the
  // tokens it was generated as (Engine: its text tokenizes back to them). Then its running checkpoint stays and
  // its prompt's end checkpoint moves to the back of the LRU order (the next turn goes on from the reply); else
  // the running one is given back (no prompt would ever reach it) and the prompt's end serves the next turn.
  void end_reply(SequenceKv& seq, bool comes_back);
  // Live sequences' running checkpoints now.
  int running_checkpoints() const;
  // Whether running checkpoints are taken at all: with at least two checkpoints per sequence that may run (one
  // for its reply while it decodes, one for its conversation's state until the next turn). With fewer they push out
  // the states prompts come back to: the seeded replay of docs/benchmarks.md with 11 checkpoints for 8 sequences
  // reused less with them than without in some runs (hit 0.661 against 0.746).
  bool keeps_reply_states() const { return !checkpoints_.empty() && state_checkpoints() >= 2 * state_slots_; }
  void checkpoint_written(BlockHash hash, bool whole);
  // The state seq's slot must take before its next step (its restore_checkpoint or restore_state), null when none;
  // restored() lets the checkpoint go (it stays cached), after the import or when the state came from elsewhere (a
  // KV connector).
  const uint8_t* pending_restore(const SequenceKv& seq) const;
  void restored(SequenceKv& seq);
  // The written checkpoint after the block whose chain hash is `hash` (state_bytes_per_slot() bytes), or null. For a
  // KV connector that keeps it beside that block once the block leaves the device (KvBlockIo::read_checkpoint).
  const uint8_t* checkpoint(BlockHash hash) const;
  // A second level for state checkpoints (a KV connector's host memory): `dropped` gets each written checkpoint the
  // cache gives back, before its buffer is reused; `lookup` is asked for the state after a cached block the cache
  // keeps no checkpoint for (null: none there), and a prefix may end at such a block (its sequence holds that state,
  // SequenceKv::restore_state, until it is restored).
  using CheckpointDropped = std::function<void(BlockHash, std::span<const uint8_t>)>;
  using CheckpointLookup = std::function<std::shared_ptr<const uint8_t>(BlockHash)>;
  void set_checkpoint_spill(CheckpointDropped dropped, CheckpointLookup lookup);

  // Grows seq's block table to hold `new_length` positions and, for a hybrid model, gives a sequence that starts
  // (length 0) a state slot. ResourceExhausted (and no change) when the pool or the slots run dry;
  // FailedPrecondition for a sequence with cached positions but no state (one forked or imported without it).
  // `window_length` >= 0: the sliding layers' blocks only up to that length (ModelRunner::prefill reserves a whole
  // prompt's full-layer blocks at once, and each chunk's window blocks as it comes). `window_from` > seq.length: the
  // positions before it arrive from outside (a KV connector's load), so the sliding layers take blocks only for the
  // window a step after them reads (a decode node given a long prompt never holds more than its window).
  Status reserve(SequenceKv& seq, int32_t new_length, int32_t window_length = -1, int32_t window_from = -1);
  // The window blocks seq holds.
  static int window_blocks_held(const SequenceKv& seq);
  // Whether reserve(seq, new_length, -1, window_from) would find the blocks it needs in both pools now (counting the
  // window blocks it gives back first, and with window_from the window blocks only for the window after it).
  bool can_reserve(const SequenceKv& seq, int32_t new_length, int32_t window_from = -1) const;
  // Gives back the window blocks that no later step of seq reads (every position of them before seq.length -
  // window + 1). reserve() does it first; the scheduler after each step, once the step's full blocks are registered
  // in the prefix cache (a registered block stays cached until its pool needs it).
  void trim_window(SequenceKv& seq);
  // Gives back the window blocks that hold no position before `length` (a load that fell short: the positions after
  // it are computed, and take their window blocks as they come, like any prompt's).
  void drop_window_after(SequenceKv& seq, int32_t length);
  // The prefix cache: seq (empty) takes the cached blocks of the longest prefix of `tokens` made of whole blocks,
  // at most max_tokens long, whose window blocks (the last window's worth before its end) are cached too; seq.length
  // is set to it; a hybrid model's prefix ends where a state checkpoint was taken, which seq then holds for its slot
  // (restore_checkpoint). Returns the positions found. `branch_at`, when given (hybrid models with checkpoints): where
  // the cached blocks of the prefix ended, when that is past the hit and another cached prefix goes on from there (a
  // shared start, such as a system prompt, from which prompts part: a state checkpoint there serves the next one);
  // else 0.
  int match_prefix(SequenceKv& seq, std::span<const model::TokenId> tokens, int max_tokens, int* branch_at = nullptr);
  // Registers seq's full block `index` (both pools) under its chain hash; `parent` is the chain hash of the block
  // before it (0 for the first).
  void register_full_block(const SequenceKv& seq, size_t index, BlockHash hash, BlockHash parent = 0);
  // Drops seq's references to its blocks (shared or cached blocks live on), frees its state slot, and empties it.
  void release(SequenceKv& seq);

  // Cached blocks the BlockManager evicted (their old contents are still in device memory until something
  // writes them) go to `handler` when flush_evictions() runs: the ModelRunner calls it before every write into
  // the cache (a step, an import), so a KV connector can copy a block out before it is reused. Without a
  // handler, evictions are not recorded.
  using EvictionHandler = std::function<void(std::span<const EvictedBlock>)>;
  void set_eviction_handler(EvictionHandler handler);
  void flush_evictions();

 private:
  KvCache(KvCacheOptions options, int window, int window_blocks)
      : options_(options),
        blocks_(options.num_blocks, options.block_tokens, options.prefix_cache),
        window_(window),
        window_pool_(window_blocks, options.block_tokens, options.prefix_cache) {}
  // The first block index seq's next step reads in the sliding layers (0 when not windowed).
  size_t first_window_block(int32_t length) const {
    return window_ > 0 ? static_cast<size_t>(std::max(0, length - window_ + 1) / options_.block_tokens) : 0;
  }
  KvCacheOptions options_;
  BlockManager blocks_;
  int window_ = 0;  // > 0: windowed, the model's sliding window
  BlockManager window_pool_;
  std::vector<bool> windowed_;  // per layer: its K and V are in window_pool_'s blocks
  size_t window_bytes_per_block_ = 0;
  EvictionHandler on_evict_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
  std::vector<ops::Tensor> k_, v_;
  size_t bytes_per_block_ = 0;
  int state_slots_ = 0;
  size_t state_bytes_ = 0;
  std::vector<ops::Tensor> conv_, recurrent_;  // per layer: [slots, K - 1, C], [slots, v_heads, S, S] (linear only)
  std::vector<int32_t> free_slots_;            // a stack: the lowest slot on top
  struct Checkpoint {
    BlockHash hash = 0;
    bool written = false;  // holds the whole state for `hash`
    bool filling = false;  // handed out by checkpoint_buffer, not yet written
    bool running = false;  // a live sequence's running checkpoint (SequenceKv::running_checkpoint)
    bool reply = false;    // taken as one (past a prompt's end), live or not
    BlockHash pair = 0;    // a reply's: the hash of its prompt's end checkpoint (0: none)
    int holders = 0;       // sequences that will restore it
    uint64_t used = 0;     // last use (checkpoint_clock_): the least recently used is given back first
    std::vector<uint8_t> bytes;
  };
  // The written checkpoint for `hash`, or -1.
  int find_checkpoint(BlockHash hash) const;
  // The least recently used checkpoint neither held, filling nor running (a free one first), or null.
  Checkpoint* least_recently_used();
  // Gives c's buffer to `hash` (to be filled); a written one it held goes first (forget).
  uint8_t* refill(Checkpoint& c, BlockHash hash, bool spill);
  // c's written state is given back (to the second level if `spill`): no prefix ends there any more.
  void forget(Checkpoint& c, bool spill);
  std::vector<Checkpoint> checkpoints_;
  std::unordered_map<BlockHash, int> written_;  // the written checkpoints by hash
  // Hybrid models with checkpoints: chain hashes of blocks that a registered block goes on from (kept loosely: a
  // child evicted since leaves its parent here; emptied when it outgrows the blocks).
  std::unordered_set<BlockHash> continued_;
  uint64_t checkpoint_clock_ = 0;
  CheckpointDropped checkpoint_dropped_;
  CheckpointLookup checkpoint_lookup_;
};

}  // namespace tessera::engine
