// KvConnector: everything a prefill/decode service needs of the engine, and nothing more (in the spirit of
// vLLM's KVConnector). The service never sees the ModelRunner, a SequenceKv or a block id:
//
//   decode side   hold_blocks(prompt)        the prompt's cached prefix (retained): a KvBlocks that gives its
//                                            blocks back when it goes, unless handed to submit_imported()
//                 reserve_rest(blocks, n)    fresh blocks for the rest, when the cache has room now
//                 submit_imported(...)       the request continues from KV that arrived in the canonical layout
//                                            (api/kv_layout.h), imported into the cache by the engine in one
//                                            device copy per run of blocks per layer
//   prefill side  submit_exporting(...)      the request's KV from `export_from` on is copied, layer by layer as
//                                            each is computed, into caller memory in the canonical layout; the
//                                            per-layer hook then runs (where the service starts that layer's
//                                            link write)
//
// Thread-safety: every method may be called from any thread (they go through Engine's thread-safe API); the
// per-layer hook runs on the engine thread and must not block.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "api/kv_layout.h"
#include "base/status.h"
#include "engine/engine.h"

namespace tessera::engine {

class KvConnector;

// KV blocks held for one request between hold_blocks() and submit_imported(). Move-only; released on
// destruction unless consumed.
class KvBlocks {
 public:
  KvBlocks() = default;
  KvBlocks(KvBlocks&& o) noexcept;
  KvBlocks& operator=(KvBlocks&& o) noexcept;
  KvBlocks(const KvBlocks&) = delete;
  KvBlocks& operator=(const KvBlocks&) = delete;
  ~KvBlocks();

  // Prompt positions already in this node's cache (whole blocks); the transfer starts there.
  int cached_tokens() const { return cached_tokens_; }
  // False when the cache had no room for the rest now: the blocks are then allocated at import.
  bool reserved() const { return reserved_ok_; }
  void release();

 private:
  friend class KvConnector;
  Engine* engine_ = nullptr;
  int cached_tokens_ = 0;
  bool reserved_ok_ = false;
  std::vector<int32_t> cached_, reserved_;
};

// The KV of positions [blocks.cached_tokens(), prompt end) in the canonical layout, as received.
struct ReceivedKv {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;  // keeps `bytes` alive; dropped as soon as the import is done
  DType dtype = DType::kF32;
  TokenId first_token = 0;             // sampled by the prefill node
  std::vector<TokenId> choice_tokens;  // n > 1: the first tokens of choices 1..n-1 (ImportedKv::choice_tokens)
};

class KvConnector {
 public:
  explicit KvConnector(Engine& engine) : engine_(engine) {}

  const model::ModelConfig& config() const { return engine_.config(); }
  // The canonical layout of `positions` positions of this model in `dtype`.
  api::KvLayout layout(int positions, DType dtype = DType::kF32) const;

  // Decode side.
  Result<KvBlocks> hold_blocks(const std::vector<TokenId>& prompt);
  // Reserves blocks for positions [blocks.cached_tokens(), prompt_tokens) before the KV is asked for, so the
  // import never waits for room; false (nothing reserved) when the cache is full now.
  bool reserve_rest(KvBlocks& blocks, int prompt_tokens);
  Result<RequestId> submit_imported(GenerationRequest request, KvBlocks blocks, ReceivedKv kv, OutputCallback callback);

  // Prefill side. `staging` holds layout(n - export_from, dtype).bytes(); `on_layer(layer, first, count)` runs
  // after positions [first, first + count) of `layer` are in it (an error fails the request).
  using LayerSaved = std::function<Status(int layer, int first, int count)>;
  Result<RequestId> submit_exporting(GenerationRequest request, int export_from, DType dtype,
                                     std::span<uint8_t> staging, LayerSaved on_layer, OutputCallback callback);

  // Either side: a request computed here.
  // Structured-output grammars for the engine's vocabulary (a prefill node samples the first token under one).
  grammar::Compiler& grammars() { return engine_.grammars(); }
  Result<RequestId> submit(GenerationRequest request, OutputCallback callback) {
    return engine_.submit(std::move(request), std::move(callback));
  }

 private:
  Engine& engine_;
};

}  // namespace tessera::engine
