// The engine's parts for KV connectors (engine/kv_connector.h): its device access (KvBlockIo), the scheduler's
// ExternalKv, and the state behind the connectors' wake functions. Internal to engine.cc and engine_kv.cc.
#pragma once

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/core.h>

#include "engine/engine.h"
#include "engine/internal/active.h"

namespace tessera::engine {

// Shared with the connectors' wake functions, which may outlive the engine.
struct Engine::WakeState {
  std::mutex mu;
  Engine* engine = nullptr;  // GUARDED_BY(mu); null once the engine is gone
};

// The connectors' layers are the layers that keep K and V of their own, in order (KvGeometry::n_layers counts them;
// kv_layer() maps a model layer to one, -1 for a layer without): hybrid models (issue 28) leave out their linear
// layers, whose recurrent state (every linear layer's window and state, ModelRunner::export_state) is the state
// section of the wire layout; gemma4 leaves out its KV-sharing layers (they read an earlier layer's K and V, which
// travel once). gemma4's layers also differ in K/V width (sliding and full heads): whole blocks (the host tier, the
// pool) move every row as wide as the widest (KvGeometry::kv_dim), a narrower layer's rows in its first values and
// zeros after them, so that a block record keeps one row width; the rows of a running request (read_rows /
// write_rows: pd-link) move at each layer's own width (KvGeometry::widths).
class Engine::Io final : public KvBlockIo {
 public:
  explicit Io(Engine& e) : e_(e), runner_(e.runner_) {
    KvCache& c = runner_.kv_cache();
    const model::ModelConfig& cfg = runner_.config();
    g_.kv_dim = 0;
    for (int l = 0; l < cfg.n_layers; ++l) {
      const bool own = cfg.keeps_kv(l);
      kv_index_.push_back(own ? static_cast<int>(model_layer_.size()) : -1);
      if (!own) continue;
      model_layer_.push_back(l);
      width_.push_back(cfg.layer_kv_dim(l));
      g_.sliding.push_back(cfg.is_sliding_layer(l) ? 1 : 0);
      g_.widths.push_back(cfg.layer_kv_dim(l));
      g_.kv_dim = std::max(g_.kv_dim, cfg.layer_kv_dim(l));
    }
    if (model_layer_.empty()) g_.kv_dim = cfg.kv_dim();
    g_.n_layers = static_cast<int>(model_layer_.size());
    g_.block_tokens = c.block_tokens();
    g_.dtype = c.k(model_layer_.empty() ? 0 : model_layer_.front()).dtype;
    g_.state_bytes = c.has_state() ? c.state_bytes_per_slot() : 0;  // 0: attention-only models keep no state
    g_.window = c.windowed() ? c.window() : 0;
  }
  const KvGeometry& geometry() const override { return g_; }
  // The connectors' layer of model layer `layer`: -1 for a linear-attention layer (no K/V).
  int kv_layer(int layer) const { return kv_index_[static_cast<size_t>(layer)]; }
  Status read_blocks(int layer, std::span<const BlockId> blocks, void* k, void* v) override {
    const SequenceKv s = table(blocks);
    return rows(layer, s, 0, s.length, g_.dtype, true, static_cast<std::byte*>(k), static_cast<std::byte*>(v));
  }
  Status write_blocks(int layer, std::span<const BlockId> blocks, const void* k, const void* v) override {
    const SequenceKv s = table(blocks);
    return rows(layer, s, 0, s.length, g_.dtype, false, wire(k), wire(v));
  }
  Status read_rows(RequestId id, int layer, int first, int count, DType dtype, void* k, void* v) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, running(id));
    return held_rows(layer, *seq, first, count, dtype, true, static_cast<std::byte*>(k), static_cast<std::byte*>(v));
  }
  Status write_rows(RequestId id, int layer, int first, int count, DType dtype, const void* k, const void* v) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, running(id));
    return held_rows(layer, *seq, first, count, dtype, false, wire(k), wire(v));
  }
  Status read_state(RequestId id, std::span<std::byte> out) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, state_of(id, out.size()));
    return seq ? runner_.export_state(*seq, out.data()) : ok_status();
  }
  Status write_state(RequestId id, std::span<const std::byte> in) override {
    TS_ASSIGN_OR_RETURN(const SequenceKv* seq, state_of(id, in.size()));
    return seq ? runner_.import_state(*seq, in.data()) : ok_status();
  }
  bool read_checkpoint(BlockHash hash, std::span<std::byte> out) override {
    const uint8_t* state = runner_.kv_cache().checkpoint(hash);
    if (state == nullptr || out.size() != g_.state_bytes || g_.state_bytes == 0) return false;
    std::memcpy(out.data(), state, out.size());
    return true;
  }

 private:
  static std::byte* wire(const void* p) { return static_cast<std::byte*>(const_cast<void*>(p)); }  // only read
  // Moves `count` rows of connectors' layer `layer` between the cache and wire arrays (read when !out) of the
  // layer's own width (`packed`) or g_.kv_dim-wide rows. Rows as wide as the layer go straight through; wider ones
  // through packed scratch.
  Status rows(int layer, const SequenceKv& s, int first, int count, DType dtype, bool out, std::byte* k, std::byte* v,
              bool packed = false) {
    const int ml = model_layer(layer);
    const int w = ml < 0 ? g_.kv_dim : width_[static_cast<size_t>(layer)];
    if (w == g_.kv_dim || packed) {
      return out ? runner_.export_kv(s, ml, first, count, dtype, k, v)
                 : runner_.import_kv(s, ml, first, count, dtype, k, v);
    }
    const size_t row = dtype_bytes(dtype, static_cast<size_t>(w)), wide = dtype_bytes(dtype, g_.kv_dim);
    const auto n = static_cast<size_t>(std::max(0, count));
    std::vector<std::byte> pk(n * row), pv(n * row);
    if (!out) {
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(pk.data() + i * row, k + i * wide, row);
        std::memcpy(pv.data() + i * row, v + i * wide, row);
      }
      return runner_.import_kv(s, ml, first, count, dtype, pk.data(), pv.data());
    }
    TS_RETURN_IF_ERROR(runner_.export_kv(s, ml, first, count, dtype, pk.data(), pv.data()));
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(k + i * wide, pk.data() + i * row, row);
      std::memset(k + i * wide + row, 0, wide - row);
      std::memcpy(v + i * wide, pv.data() + i * row, row);
      std::memset(v + i * wide + row, 0, wide - row);
    }
    return ok_status();
  }
  // rows() over a request's own tables, at the layer's own width. A windowed cache's sliding layer holds only the
  // blocks its window still reads (kNoBlock for the others): those positions read as zero rows and are not written.
  Status held_rows(int layer, const SequenceKv& seq, int first, int count, DType dtype, bool out, std::byte* k,
                   std::byte* v) {
    const int ml = model_layer(layer);
    if (ml < 0 || !runner_.kv_cache().windowed_layer(ml) || first < 0 || count <= 0) {
      return rows(layer, seq, first, count, dtype, out, k, v, true);  // rows() names what is out of range
    }
    const int bt = g_.block_tokens;
    const size_t wide = dtype_bytes(dtype, static_cast<size_t>(width_[static_cast<size_t>(layer)]));
    const int end = first + count;
    for (int pos = first; pos < end;) {
      // A run of positions whose blocks are all held, or all not (beyond the table: rows() reports it).
      auto held = [&](int p) {
        const auto b = static_cast<size_t>(p / bt);
        return b >= seq.window_blocks.size() || seq.window_blocks[b] != kNoBlock;
      };
      const bool h = held(pos);
      int to = std::min(end, (pos / bt + 1) * bt);
      while (to < end && held(to) == h) to = std::min(end, to + bt);
      const size_t at = static_cast<size_t>(pos - first) * wide, n = static_cast<size_t>(to - pos) * wide;
      if (h) {
        TS_RETURN_IF_ERROR(rows(layer, seq, pos, to - pos, dtype, out, k + at, v + at, true));
      } else if (out) {
        std::memset(k + at, 0, n);
        std::memset(v + at, 0, n);
      }
      pos = to;
    }
    return ok_status();
  }
  // A running request's block tables (a request being loaded holds its blocks too).
  Result<const SequenceKv*> running(RequestId id) const {
    auto it = e_.active_.find(id);
    if (it == e_.active_.end()) return not_found(fmt::format("request {}: no such running request", id));
    return &it->second->seq.kv;
  }
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
    return running(id);
  }
  Engine& e_;
  ModelRunner& runner_;
  KvGeometry g_;
  std::vector<int> kv_index_;     // per model layer: its connectors' layer, -1 for one without K/V of its own
  std::vector<int> model_layer_;  // per connectors' layer: its model layer
  std::vector<int> width_;        // per connectors' layer: its K/V width (gemma4: narrower than g_.kv_dim)
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
