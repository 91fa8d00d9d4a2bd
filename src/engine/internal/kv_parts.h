// The engine's parts for KV connectors (engine/kv_connector.h): its device access (KvBlockIo), the scheduler's
// ExternalKv, and the state behind the connectors' wake functions. Internal to engine.cc and engine_kv.cc.
#pragma once

#include <mutex>

#include <fmt/core.h>

#include "engine/engine.h"
#include "engine/internal/active.h"

namespace tessera::engine {

// Shared with the connectors' wake functions, which may outlive the engine.
struct Engine::WakeState {
  std::mutex mu;
  Engine* engine = nullptr;  // GUARDED_BY(mu); null once the engine is gone
};

class Engine::Io final : public KvBlockIo {
 public:
  explicit Io(ModelRunner& runner) : runner_(runner) {
    KvCache& c = runner.kv_cache();
    g_.n_layers = runner.config().n_layers;
    g_.kv_dim = runner.config().kv_dim();
    g_.block_tokens = c.block_tokens();
    g_.dtype = c.k(0).dtype;
    g_.state_bytes = 0;  // attention-only models keep no recurrent state
  }
  const KvGeometry& geometry() const override { return g_; }
  Status read_blocks(int layer, std::span<const BlockId> blocks, void* k, void* v) override {
    const SequenceKv s = table(blocks);
    return runner_.export_kv(s, layer, 0, s.length, g_.dtype, k, v);
  }
  Status write_blocks(int layer, std::span<const BlockId> blocks, const void* k, const void* v) override {
    const SequenceKv s = table(blocks);
    return runner_.import_kv(s, layer, 0, s.length, g_.dtype, k, v);
  }
  Status read_rows(int layer, std::span<const BlockId> blocks, int first, int count, DType dtype, void* k,
                   void* v) override {
    return runner_.export_kv(table(blocks), layer, first, count, dtype, k, v);
  }
  Status write_rows(int layer, std::span<const BlockId> blocks, int first, int count, DType dtype, const void* k,
                    const void* v) override {
    return runner_.import_kv(table(blocks), layer, first, count, dtype, k, v);
  }
  Status read_state(RequestId id, std::span<std::byte> out) override { return state(id, out.size()); }
  Status write_state(RequestId id, std::span<const std::byte> in) override { return state(id, in.size()); }

 private:
  SequenceKv table(std::span<const BlockId> blocks) const {
    SequenceKv s;
    s.blocks.assign(blocks.begin(), blocks.end());
    s.length = static_cast<int32_t>(blocks.size()) * g_.block_tokens;
    return s;
  }
  Status state(RequestId id, size_t bytes) const {
    if (bytes == g_.state_bytes) return ok_status();  // nothing to move for an attention-only model
    return invalid_argument(
        fmt::format("request {}: {} bytes of recurrent state, but this model keeps {}", id, bytes, g_.state_bytes));
  }
  ModelRunner& runner_;
  KvGeometry g_;
};

class Engine::External final : public ExternalKv {
 public:
  explicit External(Engine& e) : e_(e) {}
  Match match(Sequence& seq) override { return e_.match_external(*e_.active_.at(static_cast<RequestId>(seq.id))); }
  void allocated(Sequence& seq, int local) override {
    e_.allocated_external(*e_.active_.at(static_cast<RequestId>(seq.id)), local);
  }

 private:
  Engine& e_;
};

}  // namespace tessera::engine
