#include "engine/kv_connector.h"

#include <fmt/format.h>

namespace tessera::engine {

KvBlocks::KvBlocks(KvBlocks&& o) noexcept { *this = std::move(o); }

KvBlocks& KvBlocks::operator=(KvBlocks&& o) noexcept {
  if (this != &o) {
    release();
    engine_ = o.engine_;
    cached_tokens_ = o.cached_tokens_;
    reserved_ok_ = o.reserved_ok_;
    cached_ = std::move(o.cached_);
    reserved_ = std::move(o.reserved_);
    o.engine_ = nullptr;
    o.cached_.clear();
    o.reserved_.clear();
  }
  return *this;
}

KvBlocks::~KvBlocks() { release(); }

void KvBlocks::release() {
  if (engine_ != nullptr) {
    engine_->release_blocks(cached_);
    engine_->release_blocks(reserved_);
  }
  engine_ = nullptr;
  cached_.clear();
  reserved_.clear();
}

api::KvLayout KvConnector::layout(int positions, DType dtype) const {
  const model::ModelConfig& c = engine_.config();
  return {c.n_layers, c.kv_dim(), dtype, positions};
}

Result<KvBlocks> KvConnector::hold_blocks(const std::vector<TokenId>& prompt) {
  TS_ASSIGN_OR_RETURN(PrefixLookup hit, engine_.lookup_prefix(prompt));
  KvBlocks b;
  b.engine_ = &engine_;
  b.cached_tokens_ = hit.cached_tokens;
  b.cached_ = std::move(hit.blocks);
  return b;
}

bool KvConnector::reserve_rest(KvBlocks& blocks, int prompt_tokens) {
  if (blocks.engine_ == nullptr || blocks.reserved_ok_) return blocks.reserved_ok_;
  const int bt = engine_.block_tokens();
  // A full cache does not refuse the request: the blocks are then allocated at import.
  auto r = engine_.reserve_blocks((prompt_tokens + bt - 1) / bt - static_cast<int>(blocks.cached_.size()));
  if (!r.ok()) return false;
  blocks.reserved_ = std::move(*r);
  blocks.reserved_ok_ = true;
  return true;
}

Result<RequestId> KvConnector::submit_imported(GenerationRequest request, KvBlocks blocks, ReceivedKv kv,
                                               OutputCallback callback) {
  auto imported = std::make_shared<ImportedKv>();
  imported->first = blocks.cached_tokens();
  imported->count = static_cast<int>(request.prompt.size()) - blocks.cached_tokens();
  imported->dtype = kv.dtype;
  imported->view = kv.bytes;
  imported->view_owner = std::move(kv.owner);
  imported->first_token = kv.first_token;
  imported->choice_tokens = std::move(kv.choice_tokens);
  imported->cached_blocks = blocks.cached_;
  imported->reserved_blocks = blocks.reserved_;
  request.imported = std::move(imported);
  auto id = engine_.submit(std::move(request), std::move(callback));
  // Accepted: the blocks are the request's now (the engine releases them when it ends). Refused: `blocks`
  // gives them back as it goes.
  if (id.ok()) blocks.engine_ = nullptr;
  return id;
}

Result<RequestId> KvConnector::submit_exporting(GenerationRequest request, int export_from, DType dtype,
                                                std::span<uint8_t> staging, LayerSaved on_layer,
                                                OutputCallback callback) {
  const int n = static_cast<int>(request.prompt.size());
  if (export_from < 0 || export_from >= n) {
    return invalid_argument(
        fmt::format("export_from {} must leave at least one of the {} prompt tokens", export_from, n));
  }
  const api::KvLayout layout = this->layout(n - export_from, dtype);
  if (staging.size() < layout.bytes()) {
    return invalid_argument(fmt::format("{} staging bytes for {} KV bytes", staging.size(), layout.bytes()));
  }
  request.export_from = export_from;
  request.on_kv_layer = [layout, export_from, dtype, staging, on_layer = std::move(on_layer)](
                            ModelRunner& runner, const SequenceKv& seq, int layer, int first, int count) {
    uint8_t* k = staging.data() + layout.k_offset(layer, first - export_from);
    uint8_t* v = staging.data() + layout.v_offset(layer, first - export_from);
    TS_RETURN_IF_ERROR(runner.export_kv(seq, layer, first, count, dtype, k, v));
    return on_layer ? on_layer(layer, first, count) : ok_status();
  };
  return engine_.submit(std::move(request), std::move(callback));
}

}  // namespace tessera::engine
