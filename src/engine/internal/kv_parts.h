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

// Hybrid models (issue 28): only full-attention layers have K and V, so the connectors' layers are those layers in
// order (KvGeometry::n_layers counts them; kv_layer() maps a model layer to one, -1 for a linear layer), and the
// request's recurrent state (every linear layer's window and state, ModelRunner::export_state) is the state
// section of the wire layout.
class Engine::Io final : public KvBlockIo {
 public:
  explicit Io(Engine& e) : e_(e), runner_(e.runner_) {
    KvCache& c = runner_.kv_cache();
    const model::ModelConfig& cfg = runner_.config();
    for (int l = 0; l < cfg.n_layers; ++l) {
      const bool full = cfg.layer_kind(l).attention != model::AttentionKind::kLinear;
      kv_index_.push_back(full ? static_cast<int>(model_layer_.size()) : -1);
      if (full) model_layer_.push_back(l);
    }
    g_.n_layers = static_cast<int>(model_layer_.size());
    g_.kv_dim = cfg.kv_dim();
    g_.block_tokens = c.block_tokens();
    g_.dtype = c.k(model_layer_.empty() ? 0 : model_layer_.front()).dtype;
    g_.state_bytes = c.has_state() ? c.state_bytes_per_slot() : 0;  // 0: attention-only models keep no state
  }
  const KvGeometry& geometry() const override { return g_; }
  // The connectors' layer of model layer `layer`: -1 for a linear-attention layer (no K/V).
  int kv_layer(int layer) const { return kv_index_[static_cast<size_t>(layer)]; }
  Status read_blocks(int layer, std::span<const BlockId> blocks, void* k, void* v) override {
    const SequenceKv s = table(blocks);
    return runner_.export_kv(s, model_layer(layer), 0, s.length, g_.dtype, k, v);
  }
  Status write_blocks(int layer, std::span<const BlockId> blocks, const void* k, const void* v) override {
    const SequenceKv s = table(blocks);
    return runner_.import_kv(s, model_layer(layer), 0, s.length, g_.dtype, k, v);
  }
  Status read_rows(int layer, std::span<const BlockId> blocks, int first, int count, DType dtype, void* k,
                   void* v) override {
    return runner_.export_kv(table(blocks), model_layer(layer), first, count, dtype, k, v);
  }
  Status write_rows(int layer, std::span<const BlockId> blocks, int first, int count, DType dtype, const void* k,
                    const void* v) override {
    return runner_.import_kv(table(blocks), model_layer(layer), first, count, dtype, k, v);
  }
  Status read_state(RequestId id, std::span<std::byte> out) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, state_of(id, out.size()));
    return seq ? runner_.export_state(*seq, out.data()) : ok_status();
  }
  Status write_state(RequestId id, std::span<const std::byte> in) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, state_of(id, in.size()));
    return seq ? runner_.import_state(*seq, in.data()) : ok_status();
  }

 private:
  int model_layer(int layer) const {
    // Out of range stays out of range: export_kv / import_kv name it.
    return layer >= 0 && layer < g_.n_layers ? model_layer_[static_cast<size_t>(layer)] : -1;
  }
  SequenceKv table(std::span<const BlockId> blocks) const {
    SequenceKv s;
    s.blocks.assign(blocks.begin(), blocks.end());
    s.length = static_cast<int32_t>(blocks.size()) * g_.block_tokens;
    return s;
  }
  // The sequence whose state moves (null when there is none to move: an attention-only model).
  Result<const SequenceKv*> state_of(RequestId id, size_t bytes) const {
    if (bytes != g_.state_bytes)
      return invalid_argument(
          fmt::format("request {}: {} bytes of recurrent state, but this model keeps {}", id, bytes, g_.state_bytes));
    if (bytes == 0) return nullptr;
    auto it = e_.active_.find(id);
    if (it == e_.active_.end()) return not_found(fmt::format("request {}: no such running request", id));
    return &it->second->seq.kv;
  }
  Engine& e_;
  ModelRunner& runner_;
  KvGeometry g_;
  std::vector<int> kv_index_;     // per model layer: its connectors' layer, -1 for a linear layer
  std::vector<int> model_layer_;  // per connectors' layer: its model layer
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
