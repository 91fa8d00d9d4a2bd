#include "engine/kv_fork.h"

#include <cstddef>
#include <vector>

#include <fmt/core.h>

namespace tessera::engine {

Status fork_kv(ModelRunner& runner, const SequenceKv& from, SequenceKv& to) {
  KvCache& cache = runner.kv_cache();
  // A hybrid model's linear-attention state is not forked: the engine then computes the choice's prompt again in a
  // state slot of its own, as for a preempted sequence (Engine::admit_choice).
  if (cache.has_state())
    return unimplemented(
        fmt::format("fork_kv: a hybrid {} model's recurrent state is not forked", runner.config().arch));
  BlockManager& blocks = cache.blocks();
  const int bt = cache.block_tokens();
  const int full = from.length / bt;
  const int tail = from.length % bt;
  if (static_cast<size_t>(full + (tail > 0 ? 1 : 0)) > from.blocks.size() || !to.blocks.empty())
    return internal_error(fmt::format("fork_kv: {} positions in {} blocks, fork target holds {} blocks", from.length,
                                      from.blocks.size(), to.blocks.size()));
  // A windowed cache: the sliding layers' full blocks still in the window are shared the same way.
  BlockManager& window = cache.window_pool();
  const bool windowed = cache.windowed();
  for (int i = 0; i < full; ++i) {
    blocks.retain(from.blocks[static_cast<size_t>(i)]);
    to.blocks.push_back(from.blocks[static_cast<size_t>(i)]);
    if (!windowed) continue;
    const BlockId w = from.window_blocks[static_cast<size_t>(i)];
    if (w != kNoBlock) window.retain(w);
    to.window_blocks.push_back(w);
  }
  auto undo = [&](Status st) {
    cache.release(to);
    return st;
  };
  if (tail > 0) {
    auto copy = blocks.allocate();
    if (!copy.ok()) return undo(copy.status());
    to.blocks.push_back(*copy);
    if (windowed) {
      auto wcopy = window.allocate();
      if (!wcopy.ok()) return undo(wcopy.status());
      to.window_blocks.push_back(*wcopy);
    }
    const int first = full * bt;
    for (int l = 0; l < runner.config().n_layers; ++l) {
      if (!runner.config().keeps_kv(l)) continue;  // a gemma4 KV-sharing layer: its source layer's rows are copied
      const DType dtype = cache.k(l).dtype;
      const size_t row = cache.k(l).row_bytes() / static_cast<size_t>(bt);  // one position, in the cache's type
      std::vector<std::byte> k(row * static_cast<size_t>(tail)), v(row * static_cast<size_t>(tail));
      Status st = runner.export_kv(from, l, first, tail, dtype, k.data(), v.data());
      if (st.ok()) st = runner.import_kv(to, l, first, tail, dtype, k.data(), v.data());
      if (!st.ok()) return undo(st.with_context("copying the shared prompt's last KV block"));
    }
  }
  to.length = from.length;
  return ok_status();
}

}  // namespace tessera::engine
