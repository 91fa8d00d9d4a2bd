// KvConnector: the plug-in through which KV moves between the engine's paged device cache and anything outside it:
// another node (kv/pd_link: prefill -> decode over the link), host memory and local disk (kv/host), a cluster pool.
// The engine holds an ordered list of connectors (Engine::add_connector) and calls them at fixed points of its
// loop, in the spirit of vLLM's KVConnectorBase_V1. A connector never sees the ModelRunner, a SequenceKv or the
// BlockManager: it gets typed block ids, the engine's KvBlockIo (device copies in and out of the cache) and a
// function that wakes the engine loop. docs/kv.md is the long form of this contract.
//
// Scheduler side (engine thread; decisions only, never blocking):
//   match(request, supplied)   At admission, after the device prefix cache supplied some positions: how many
//                              positions from `supplied` on this connector can fill, and whether that takes time
//                              (async). Connectors are asked in order, each from where the previous one stopped.
//                              Asked again for the same request when its blocks could not be allocated (the
//                              request keeps waiting); only allocated() commits.
//   allocated(request, blocks, first, count)
//                              The request's block table now has room for positions [first, first + count), this
//                              connector's to fill (count 0: it supplies nothing for this admission). An async
//                              connector starts fetching now and reports the end through poll().
//   poll()                     Asynchronous loads that ended (how many positions arrived intact; a connector whose
//                              positions were computed elsewhere also brings the first sampled token of each
//                              choice), and requests whose blocks it kept after they ended (finished()).
//   finished(id, end)          The request ended (or was preempted), before its blocks are freed. At its end,
//                              returning true keeps its blocks until poll() names it in `released` (a transfer
//                              still reading or writing them); on preemption the blocks go at once.
//   evicted(blocks)            Cached device blocks about to be overwritten; their contents are still intact.
//   checkpoint_evicted(hash, state), checkpoint(hash)
//                              Hybrid models: a state checkpoint the device prefix cache gives back (its buffer goes to
//                              a newer one), which a connector may keep in memory, and the state after a block that a
//                              connector keeps so (a device prefix hit may end at a block it still holds whose
//                              checkpoint only a connector keeps: KvCache::set_checkpoint_spill).
// Worker side (engine thread, around each model step; the step runs eagerly while any of this has work):
//   start_load(ids)            The requests of this step whose positions this connector fills now.
//   wait_layer_load(layer)     Before the layer runs: that layer's KV of those requests is in the cache on return.
//   start_save(chunks)         What the step computes; true when the connector saves layers of it.
//   save_layer(layer)          Right after the layer's K and V are in the cache.
//   wait_save()                After the step's last layer.
// A request that the engine fails to load (a connector reports fewer positions than it promised, or a load
// fails) is not lost: the positions that did not arrive are computed here.
//
// Per-request state that travels: the K and V rows of positions, and (hybrid models, issue 28) the request's
// recurrent state (KvGeometry::state_bytes; 0 for attention-only models), via KvBlockIo::read_state / write_state.
// A hybrid model's positions are only of use with the state after the last of them: a connector brings it with the
// prompt's end (KvMatch::first_tokens: pd-link) or after the last position it fills (KvMatch::state: the host tiers,
// which keep the device prefix cache's state checkpoints, KvBlockIo::read_checkpoint, beside the blocks they end).
// A hybrid model's connector layers are its full-attention layers (KvGeometry::n_layers; no hook for a linear
// layer). The canonical wire layout (api/kv_layout.h, version 2) names both sections.
//
// Thread-safety: every method but stats() is called on the engine thread only; stats() from any thread. A
// connector's own threads talk to the engine only through the wake function and poll().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/block_manager.h"
#include "engine/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

using RequestId = uint64_t;
using model::TokenId;

// Parameters a caller addresses to one connector for one request (vLLM's kv_transfer_params): the PD service
// attaches what the pd-link connector needs. A connector reads only params addressed to its own name.
class KvTransferParams {
 public:
  virtual ~KvTransferParams() = default;
  virtual std::string_view connector() const = 0;
};

// The shape of the engine's KV cache, as connectors need it.
struct KvGeometry {
  int n_layers = 0;  // layers with K and V: a hybrid model's full-attention layers, in order
  int kv_dim = 0;    // n_kv_heads * head_dim
  int block_tokens = 0;
  DType dtype = DType::kF32;  // the cache's element type
  // Bytes of a request's recurrent state (hybrid models' linear-attention layers): 0 for attention-only models.
  size_t state_bytes = 0;
  // Per layer: 1 for a sliding-window layer (the model's, whatever the cache keeps; api::KvLayout::sliding).
  std::vector<uint8_t> sliding;
  // Per layer: its K (V) width, n_kv_heads * head_dim of that layer (gemma4's sliding layers are narrower than
  // kv_dim, the widest); the rows read_rows / write_rows move are this wide.
  std::vector<int> widths;
  // > 0: the cache keeps only the sliding layers' windows, of this many positions (engine/kv_cache.h).
  int window = 0;

  // Whether every layer's row is whole blocks of `t` (always for f32, f16, bf16; q8_0 and q4_0 need widths of 32s).
  bool whole_blocks(DType t) const {
    return std::all_of(widths.begin(), widths.end(), [&](int w) { return w % dtype_info(t).block_elems == 0; });
  }
  // The first position whose sliding-layer rows the cache holds for a request of `length` positions about to take
  // its next step (the first of the window block the step's window starts in; 0 when every position is kept).
  int first_window_row(int length) const {
    if (window <= 0 || block_tokens <= 0) return 0;
    return std::max(0, length - window + 1) / block_tokens * block_tokens;
  }

  // One position of K (or V) of one layer, in the cache's type.
  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<size_t>(kv_dim)); }
  // The K and V of one block, every layer.
  size_t block_bytes() const {
    return 2 * static_cast<size_t>(n_layers) * static_cast<size_t>(block_tokens) * row_bytes();
  }
};

// A request as the scheduler side sees it (valid during the call).
struct KvRequestView {
  RequestId id = 0;
  std::span<const TokenId> tokens;  // prompt, then any tokens generated before a preemption
  int prompt_len = 0;
  std::span<const BlockHash> block_hashes;  // chain hashes of the whole blocks of `tokens` (BlockManager::chain_hash)
  int choices = 1;                          // GenerationRequest::n
  std::shared_ptr<const KvTransferParams> params;  // GenerationRequest::kv_transfer, whoever it is addressed to

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  // The params when they are addressed to `connector` (and of type T), else null.
  template <class T>
  std::shared_ptr<const T> params_for(std::string_view connector) const {
    return params != nullptr && params->connector() == connector ? std::dynamic_pointer_cast<const T>(params) : nullptr;
  }
};

struct KvMatch {
  int tokens = 0;      // positions [supplied, supplied + tokens) this connector can fill
  bool async = false;  // filling them takes time: the request waits, holding its blocks, until poll() reports it
  // The positions are a cache hit (they count as the request's cached tokens and in the prefix-cache hit rate);
  // false for KV computed for this request elsewhere (a prefill node's).
  bool cached = true;
  // The connector brings the KV up to the end of `tokens` and the first sampled token of every choice (the
  // prompt was computed elsewhere): only with async, only for a request that has generated nothing yet. Any
  // other match leaves at least one position for the engine to compute (it needs that position's logits).
  bool first_tokens = false;
  // The connector brings, with its positions, the recurrent state after the last of them (a hybrid model's; see
  // above): it writes it (KvBlockIo::write_state) in start_load, before the step's first layer runs, and an
  // asynchronous load that falls short reports only positions whose state it holds. Without it (and without
  // first_tokens) a hybrid model takes none of the positions.
  bool state = false;
};

struct KvLoadDone {
  RequestId id = 0;
  // Of the positions promised, how many (from the first) arrived intact; the rest are computed here.
  int tokens = 0;
  std::vector<TokenId> first_tokens;  // KvMatch::first_tokens: one per choice when every position arrived
  // ... and, for a request that asked for logprobs, theirs (one per choice, computed where they were drawn).
  std::vector<TokenLogprobs> first_logprobs;
};

struct KvPoll {
  std::vector<KvLoadDone> loads;
  std::vector<RequestId> released;  // requests whose blocks finished() kept are free to go now
};

enum class KvEnd {
  kFinished,   // completed (stop, length)
  kAborted,    // cancelled, or failed
  kPreempted,  // its blocks go back to the pool now; it will be admitted (and matched) again later
};

// One sequence's work in a step (worker side).
struct KvStepChunk {
  RequestId id = 0;
  std::span<const BlockId> blocks;  // its block table; room for positions [0, to)
  int from = 0;                     // positions [from, to) are computed by this step
  int to = 0;
  int prompt_len = 0;
};

// The engine's device access, for connectors (engine thread only).
class KvBlockIo {
 public:
  virtual ~KvBlockIo() = default;
  virtual const KvGeometry& geometry() const = 0;
  // Whole blocks of one layer, in the cache's own type: K and V as [block][position][kv_dim] each. Exact bytes.
  virtual Status read_blocks(int layer, std::span<const BlockId> blocks, void* k, void* v) = 0;
  virtual Status write_blocks(int layer, std::span<const BlockId> blocks, const void* k, const void* v) = 0;
  // Positions [first, first + count) of a running request (in its block tables as they are now, so during a step
  // also the positions the step computes) as rows [count][widths[layer]] of `dtype` (the wire's), converted from
  // (to) the cache's type. A windowed cache (engine/kv_cache.h) keeps a sliding layer's rows only while its window
  // reads them: such a layer's rows of positions no later step of the request reads come out as zeros and are dropped
  // when written (the decode side of a hand-off never reads them).
  virtual Status read_rows(RequestId id, int layer, int first, int count, DType dtype, void* k, void* v) = 0;
  virtual Status write_rows(RequestId id, int layer, int first, int count, DType dtype, const void* k,
                            const void* v) = 0;
  // A request's recurrent state, geometry().state_bytes bytes (none for attention-only models: an empty span).
  virtual Status read_state(RequestId id, std::span<std::byte> out) = 0;
  virtual Status write_state(RequestId id, std::span<const std::byte> in) = 0;
  // The device prefix cache's state checkpoint after the block whose chain hash is `hash` (a hybrid model's recurrent
  // state after that block's last position, engine/kv_cache.h), copied into `out` (geometry().state_bytes bytes).
  // False when the cache keeps none for it (or the model has no state).
  virtual bool read_checkpoint(BlockHash hash, std::span<std::byte> out) { return false; }
};

// What one tier of a connector did, cumulative since start (counters) or now (held).
struct KvTierStats {
  std::string tier;           // "host", "disk", "remote", ...
  bool prefix_cache = false;  // its hits are prefix-cache hits (the node's hit rate counts them)
  uint64_t hit_tokens = 0;    // positions it supplied to requests
  uint64_t load_bytes = 0;    // bytes moved from it towards the device cache
  uint64_t save_bytes = 0;    // bytes moved into it
  double load_seconds = 0;
  double save_seconds = 0;
  uint64_t blocks = 0;          // held now
  uint64_t bytes = 0;           // held now
  uint64_t capacity_bytes = 0;  // 0: unbounded or not applicable
  uint64_t evicted_blocks = 0;  // dropped from this tier (moved down, or out)
  uint64_t failed_blocks = 0;   // found corrupt or unreadable on load: recomputed, never used
  // A tier shared across nodes (the cluster pool): the blocks other nodes hold there that this node sees.
  bool shared = false;
  uint64_t peer_blocks = 0;
};

struct KvConnectorStats {
  std::string connector;
  std::vector<KvTierStats> tiers;
};

class KvConnector {
 public:
  virtual ~KvConnector() = default;
  virtual std::string_view name() const = 0;
  // Whether it works with a windowed cache, whose sliding layers keep only their windows (engine/kv_cache.h): only
  // a connector that moves rows of running requests (read_rows / write_rows) and never whole blocks can; blocks
  // kept after their request (tiers, the pool) would lack the sliding layers' older rows. Engine::add_connector
  // refuses the others on such a cache.
  virtual bool works_with_windows() const { return false; }
  // Once, before the engine starts: its device access (valid while the engine lives) and a function that wakes
  // the engine loop (callable from any thread, at any time, also after the engine is gone).
  virtual Status attach(KvBlockIo& io, std::function<void()> wake) = 0;
  // Before attach(): the engine's KV event log (kv_events.h), for a connector that holds blocks in tiers of its own
  // to publish what they take in and drop (any thread; the log is thread-safe). Null when the engine goes.
  virtual void set_event_log(KvEventLog* log) {}

  // Scheduler side.
  virtual KvMatch match(const KvRequestView& request, int supplied) = 0;
  virtual void allocated(const KvRequestView& request, std::span<const BlockId> blocks, int first, int count) {}
  virtual KvPoll poll() { return {}; }
  virtual bool finished(RequestId id, KvEnd end) { return false; }
  virtual void evicted(std::span<const EvictedBlock> blocks) {}
  // Hybrid models (see above): the state after the block whose chain hash is `hash`, geometry().state_bytes bytes.
  virtual void checkpoint_evicted(BlockHash hash, std::span<const std::byte> state) {}
  virtual std::shared_ptr<const uint8_t> checkpoint(BlockHash hash) { return nullptr; }

  // Worker side.
  virtual Status start_load(std::span<const RequestId> ids) { return ok_status(); }
  virtual Status wait_layer_load(int layer) { return ok_status(); }
  virtual bool start_save(std::span<const KvStepChunk> chunks) { return false; }
  virtual Status save_layer(int layer) { return ok_status(); }
  virtual Status wait_save() { return ok_status(); }

  virtual KvConnectorStats stats() const = 0;
};

}  // namespace tessera::engine
