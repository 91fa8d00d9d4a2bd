#include "serve/kv_budget.h"

#include <algorithm>

#include <fmt/format.h>

#include "api/kv_layout.h"
#include "engine/kv_cache.h"

namespace tessera::serve {

Result<KvBudget> plan_kv_budget(const model::ModelConfig& model, const KvBudgetFlags& f, uint64_t device_bytes,
                                uint64_t host_bytes, uint64_t weight_bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  KvBudget b;
  b.kv_mib = f.kv_memory_mib;
  if (f.kv_memory_fraction > 0) {
    // The node may use this fraction of its device's memory (a host device: the machine's RAM); the weights come
    // out of it first, and the KV cache gets the rest.
    const uint64_t memory = device_bytes > 0 ? device_bytes : host_bytes;
    const double left = f.kv_memory_fraction * static_cast<double>(memory) - static_cast<double>(weight_bytes);
    if (left < kMiB)
      return invalid_argument(
          fmt::format("--kv-memory-fraction {}: {:.0f} MiB of the device's {:.0f} MiB leaves no room for KV after "
                      "{:.0f} MiB of weights",
                      f.kv_memory_fraction, f.kv_memory_fraction * memory / kMiB, memory / kMiB, weight_bytes / kMiB));
    b.kv_mib = left / kMiB;
    b.info.push_back(fmt::format("--kv-memory-fraction {}: {:.0f} MiB of KV ({:.0f} MiB device, {:.0f} MiB weights)",
                                 f.kv_memory_fraction, b.kv_mib, memory / kMiB, weight_bytes / kMiB));
  }
  // Only full-attention layers keep K and V; a hybrid model's linear layers keep one recurrent state per running
  // sequence instead, taken from the same budget first (--kv-memory counts both).
  double kv_mib = b.kv_mib;
  // gemma4: each layer with K/V of its own at its own width and KV heads (the KV-sharing layers hold none).
  int kv_layers = model.cached_kv_layers();
  auto block_bytes = [&](int64_t width) {
    return static_cast<double>(api::KvLayout{1, static_cast<int>(width), f.kv_dtype, f.block_size}.bytes());
  };
  double bytes_per_block = block_bytes(model.cached_kv_width());
  if (model.has_linear_layers()) {
    b.state_mib = static_cast<double>(model.recurrent_state_bytes()) * f.max_num_seqs / kMiB;
    if (b.state_mib >= kv_mib)
      return invalid_argument(
          fmt::format("--kv-memory {:g} MiB does not hold the recurrent state of --max-num-seqs {} sequences of this "
                      "hybrid model ({:.1f} MiB) and any KV",
                      kv_mib, f.max_num_seqs, b.state_mib));
    kv_mib -= b.state_mib;
    b.state_slots = f.max_num_seqs;
    // Prefix reuse goes through state checkpoints (engine/kv_cache.h), host copies of a slot's state.
    const double each_mib = static_cast<double>(model.recurrent_state_bytes()) / kMiB;
    std::string reuse;
    if (!f.prefix_reuse) {
      reuse = "prefix reuse is off (--no-prefix-cache or --role-switchable)";
    } else if (f.state_checkpoints > 0) {
      b.checkpoint_mib = each_mib * f.state_checkpoints;
      if (b.checkpoint_mib >= kv_mib)
        return invalid_argument(fmt::format(
            "--state-checkpoints {} ({:.1f} MiB) leave no room for KV in the {:.1f} MiB --kv-memory leaves after the "
            "running sequences' state: fewer checkpoints or more --kv-memory",
            f.state_checkpoints, b.checkpoint_mib, kv_mib));
      b.state_checkpoints = f.state_checkpoints;
    } else if (f.state_checkpoints < 0) {
      b.state_checkpoints = static_cast<int>(0.25 * kv_mib / each_mib);
      b.checkpoint_mib = each_mib * b.state_checkpoints;
    }
    kv_mib -= b.checkpoint_mib;
    if (reuse.empty())
      reuse = b.state_checkpoints > 0
                  ? fmt::format(
                        "prefix reuse through {} state checkpoints ({:.1f} MiB), taken at prompts' last block "
                        "boundaries, at chat system prompts' ends and where prompts part{}",
                        b.state_checkpoints, b.checkpoint_mib,
                        b.state_checkpoints >= 2 * f.max_num_seqs
                            ? ", and at replies' last block boundaries"
                            : " (replies' states need two checkpoints per sequence: more --kv-memory)")
                  : std::string("prefix reuse is off (no state checkpoints: --state-checkpoints, --kv-memory)");
    b.info.push_back(
        fmt::format("hybrid model: {} linear-attention layers, {:.1f} MiB of recurrent state for {} "
                    "sequences; {}",
                    model.linear_layer_count(), b.state_mib, f.max_num_seqs, reuse));
  }
  if (f.max_model_len > model.max_seq_len)
    return invalid_argument(
        fmt::format("--max-model-len {} exceeds the model's context of {} tokens", f.max_model_len, model.max_seq_len));
  // Sliding layers that keep only their windows: their pool first, then the full layers' blocks from the rest, when
  // those hold more positions than every layer's would (engine/kv_cache.h). All layers sliding: the full layers'
  // blocks cost nothing and only count positions.
  double window_block_bytes = 0;  // > 0: the sliding layers keep their windows, in blocks of this size
  if (f.window_kv) {
    model::ModelConfig served = model;
    if (f.max_model_len > 0) served.max_seq_len = f.max_model_len;
    const int window_blocks =
        engine::KvCache::window_pool_blocks(served, f.block_size, f.max_num_seqs, std::max(1, f.max_batch_tokens));
    const double window_mib = window_blocks * block_bytes(engine::KvCache::kv_width(model, true)) / kMiB;
    const double full_bytes = block_bytes(engine::KvCache::kv_width(model, false));
    const double whole = kv_mib * kMiB / bytes_per_block;
    const double windowed = window_mib >= kv_mib ? 0
                            : full_bytes <= 0    ? 1e18
                                                 : (kv_mib - window_mib) * kMiB / full_bytes;
    if (window_blocks > 0 && windowed > whole) {
      b.window_blocks = window_blocks;
      b.window_mib = window_mib;
      window_block_bytes = block_bytes(engine::KvCache::kv_width(model, true));
      kv_mib -= window_mib;
      bytes_per_block = full_bytes;
      for (int l = 0; l < model.n_layers; ++l) kv_layers -= model.keeps_kv(l) && model.is_sliding_layer(l) ? 1 : 0;
      b.info.push_back(fmt::format(
          "sliding-window layers keep their window of {} only: {} blocks ({:.1f} MiB) for {} sequences; {}",
          model.sliding_window, window_blocks, window_mib, f.max_num_seqs,
          full_bytes <= 0 ? std::string("every layer with K and V slides, so the context is the only bound")
                          : fmt::format("the other layers hold {} positions where every layer's would hold {}",
                                        static_cast<int64_t>(windowed) * f.block_size,
                                        static_cast<int64_t>(whole) * f.block_size)));
    } else if (window_blocks > 0) {
      b.info.push_back(fmt::format(
          "sliding-window layers keep every position: their windows of {} for {} sequences ({:.1f} MiB) would leave "
          "room for fewer positions than without them",
          model.sliding_window, f.max_num_seqs, window_mib));
    }
  }
  const auto budget_blocks =
      bytes_per_block <= 0 ? int64_t{1} << 40 : static_cast<int64_t>(kv_mib * kMiB / bytes_per_block);
  b.max_seq_len = model.max_seq_len;
  if (f.max_model_len > 0) {
    b.max_seq_len = f.max_model_len;
  } else if (budget_blocks * f.block_size < model.max_seq_len && budget_blocks > 0) {
    const auto fits = static_cast<int>(budget_blocks * f.block_size);
    b.warnings.push_back(
        fmt::format("--kv-memory {:g} MiB holds {} tokens, less than the model's context of {}; serving a context of "
                    "{} (set --max-model-len or --kv-memory to choose)",
                    b.kv_mib, fits, model.max_seq_len, fits));
    b.max_seq_len = fits;
  }
  const int blocks_per_seq = (b.max_seq_len + f.block_size - 1) / f.block_size;
  // No more than every running sequence at full context could use; at least one full context.
  b.num_blocks =
      static_cast<int>(std::min<int64_t>(budget_blocks, static_cast<int64_t>(blocks_per_seq) * f.max_num_seqs));
  if (b.num_blocks < blocks_per_seq)
    return invalid_argument(fmt::format(
        "--kv-memory {:g} MiB holds {} tokens, less than the served context of {} tokens ({:.1f} MiB needed)", b.kv_mib,
        budget_blocks * f.block_size, b.max_seq_len, blocks_per_seq * bytes_per_block / kMiB));
  // What the full layers' blocks leave of the budget (capped at every sequence's whole context) goes to the windows'
  // pool: room for the prefix cache to keep the windows of more prefixes. Never more blocks than the full layers have
  // (each window block caches one of their positions' blocks).
  if (window_block_bytes > 0) {
    const double left = kv_mib * kMiB - b.num_blocks * bytes_per_block;
    const auto extra = static_cast<int>(std::min<double>(left / window_block_bytes, b.num_blocks - b.window_blocks));
    if (extra > 0) {
      b.window_blocks += extra;
      b.window_mib += extra * window_block_bytes / kMiB;
      b.info.push_back(
          fmt::format("{} more window blocks ({:.1f} MiB) from what the other layers leave, for the prefix "
                      "cache",
                      extra, extra * window_block_bytes / kMiB));
    }
  }
  // The line docs/kv.md quotes to compare KV cache types: what one token costs and how many blocks fit.
  b.info.push_back(fmt::format(
      "KV cache {} (K and V): {:.0f} bytes per token over {} layers, {} blocks of {} tokens ({} tokens, {:.1f} MiB)",
      dtype_name(f.kv_dtype), bytes_per_block / f.block_size, kv_layers, b.num_blocks, f.block_size,
      static_cast<int64_t>(b.num_blocks) * f.block_size, b.num_blocks * bytes_per_block / kMiB));
  return b;
}

}  // namespace tessera::serve
