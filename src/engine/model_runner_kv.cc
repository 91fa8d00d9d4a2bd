// ModelRunner's KV movement (export_kv / import_kv): the rows of a layer's positions between the paged cache and
// row-major wire arrays, as runs of contiguous blocks with one device copy per run for K and for V.
#include <cstring>

#include <fmt/format.h>

#include "base/quant.h"
#include "engine/model_runner.h"

namespace tessera::engine {

namespace {

// Converts `n` values between f32 and f16 (either direction, or a plain copy).
Status convert_rows(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, dtype_bytes(from, n));
    return ok_status();
  }
  if (from == DType::kF32) return quantize({static_cast<const float*>(src), n}, to, dst);
  if (to == DType::kF32) return dequantize(src, from, {static_cast<float*>(dst), n});
  std::vector<float> tmp(n);
  TS_RETURN_IF_ERROR(dequantize(src, from, tmp));
  return quantize(tmp, to, dst);
}

}  // namespace

Status ModelRunner::copy_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, bool out, uint8_t* k,
                            uint8_t* v) {
  if (layer >= 0 && layer < config_.n_layers && config_.layer_kind(layer).attention == model::AttentionKind::kLinear) {
    return unimplemented(fmt::format(
        "{}: layer {} of this hybrid {} model is a linear-attention layer: it has no K/V (its recurrent state moves "
        "with export_state / import_state)",
        out ? "export_kv" : "import_kv", layer, config_.arch));
  }
  if (layer >= 0 && layer < config_.n_layers && config_.kv_source_layer(layer) != layer) {
    return unimplemented(fmt::format("{}: layer {} of this {} model reads layer {}'s K/V and keeps none of its own",
                                     out ? "export_kv" : "import_kv", layer, config_.arch,
                                     config_.kv_source_layer(layer)));
  }
  const int bt = kv_->block_tokens();
  // A windowed cache's sliding layer: its own pool's blocks, of which only the window's are kept.
  const bool windowed = layer >= 0 && layer < config_.n_layers && kv_->windowed_layer(layer);
  const std::vector<BlockId>& table = windowed ? seq.window_blocks : seq.blocks;
  const int pool_blocks = windowed ? kv_->window_pool().num_blocks() : kv_->num_blocks();
  // Bounded by the reserved blocks, not seq.length: a layer hook exports positions of the step in progress.
  if (layer < 0 || layer >= config_.n_layers || first < 0 || count < 0 ||
      static_cast<size_t>(first + count + bt - 1) / static_cast<size_t>(bt) > table.size()) {
    return out_of_range(fmt::format("{}: layer {} positions [{}, {}) outside the reserved blocks",
                                    out ? "export_kv" : "import_kv", layer, first, first + count));
  }
  const size_t kv_dim = static_cast<size_t>(config_.layer_kv_dim(layer));        // gemma4: each layer its own width
  const size_t row_bytes = kv_->k(layer).row_bytes() / static_cast<size_t>(bt);  // one position of one block
  // The positions as runs of rows that are contiguous in the cache (within a block, and across blocks whose ids
  // follow each other): one device copy per run for K and one for V, never one per position. Offsets are
  // relative to the layer's K (V) tensor; the host side is the rows in position order.
  if (!out) kv_->flush_evictions();  // the rows written may land in blocks whose cached KV a connector keeps
  std::vector<ops::CopyRun> runs;
  for (int i = 0; i < count;) {
    const int pos = first + i;
    const auto block = static_cast<int32_t>(table[static_cast<size_t>(pos / bt)]);
    if (windowed && table[static_cast<size_t>(pos / bt)] == kNoBlock) {
      return out_of_range(fmt::format(
          "{}: position {} of sliding layer {} has left its window of {} and is no longer kept (a KV connector needs "
          "the cache without windows: KvCacheOptions::window_kv off)",
          out ? "export_kv" : "import_kv", pos, layer, kv_->window()));
    }
    if (block < 0 || block >= pool_blocks) {
      return out_of_range(fmt::format("{}: block {} is not a block of this cache ({} blocks)",
                                      out ? "export_kv" : "import_kv", block, pool_blocks));
    }
    const int rows = std::min(bt - pos % bt, count - i);
    const size_t dev = (static_cast<size_t>(block) * bt + static_cast<size_t>(pos % bt)) * row_bytes;
    const size_t host = static_cast<size_t>(i) * row_bytes;
    const size_t bytes = static_cast<size_t>(rows) * row_bytes;
    if (!runs.empty() && runs.back().device_offset + runs.back().bytes == dev) {
      runs.back().bytes += bytes;
    } else {
      runs.push_back({dev, host, bytes});
    }
    i += rows;
  }
  const size_t native_bytes = static_cast<size_t>(count) * row_bytes;
  // Same dtype on the wire as in the cache: the runs land in (come from) the caller's arrays directly, which
  // on a prefill or decode node are the link's registered memory (one copy between device and wire). Otherwise
  // they go through host scratch in the cache's dtype, converted row by row.
  const bool direct = kv_->k(layer).dtype == dtype;
  std::vector<std::byte> scratch(direct ? 0 : native_bytes);
  for (int which = 0; which < 2; ++which) {
    const ops::Tensor& cache = which == 0 ? kv_->k(layer) : kv_->v(layer);
    uint8_t* wire = which == 0 ? k : v;
    std::span<std::byte> host =
        direct ? std::span<std::byte>(reinterpret_cast<std::byte*>(wire), native_bytes) : std::span(scratch);
    if (!out && !direct) {
      TS_RETURN_IF_ERROR(convert_rows(wire, dtype, host.data(), cache.dtype, kv_dim * static_cast<size_t>(count)));
    }
    TS_ASSIGN_OR_RETURN(std::unique_ptr<ops::HostStaging> staging, device_.register_staging(host));
    std::vector<ops::CopyRun> placed = runs;
    for (ops::CopyRun& r : placed) r.device_offset += cache.offset;
    TS_RETURN_IF_ERROR(stream_->copy_runs(*cache.buffer, *staging, placed,
                                          out ? ops::CopyDirection::kToHost : ops::CopyDirection::kToDevice));
    if (out && !direct) {
      TS_RETURN_IF_ERROR(convert_rows(host.data(), cache.dtype, wire, dtype, kv_dim * static_cast<size_t>(count)));
    }
  }
  return stream_->synchronize();
}

Status ModelRunner::export_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, void* k_out,
                              void* v_out) {
  return copy_kv(seq, layer, first, count, dtype, true, static_cast<uint8_t*>(k_out), static_cast<uint8_t*>(v_out));
}

Status ModelRunner::import_kv(const SequenceKv& seq, int layer, int first, int count, DType dtype, const void* k_in,
                              const void* v_in) {
  // copy_kv only reads the wire buffers when importing.
  return copy_kv(seq, layer, first, count, dtype, false, static_cast<uint8_t*>(const_cast<void*>(k_in)),
                 static_cast<uint8_t*>(const_cast<void*>(v_in)));
}

Status ModelRunner::copy_state(const SequenceKv& seq, bool out, uint8_t* bytes) {
  if (!kv_->has_state())
    return failed_precondition(fmt::format("{}: this {} model carries no recurrent state",
                                           out ? "export_state" : "import_state", config_.arch));
  if (seq.state_slot < 0 || seq.state_slot >= kv_->state_slots())
    return failed_precondition(fmt::format("{}: the sequence holds no recurrent-state slot (reserve it first)",
                                           out ? "export_state" : "import_state"));
  size_t at = 0;
  for (int l = 0; l < config_.n_layers; ++l) {
    if (config_.layer_kind(l).attention != model::AttentionKind::kLinear) continue;
    for (const ops::Tensor& t : {kv_->conv_state(l, seq.state_slot), kv_->recurrent_state(l, seq.state_slot)}) {
      TS_RETURN_IF_ERROR(out ? stream_->download(t, bytes + at) : stream_->upload(t, bytes + at));
      at += t.bytes();
    }
  }
  return stream_->synchronize();
}

Status ModelRunner::export_state(const SequenceKv& seq, void* out) {
  return copy_state(seq, true, static_cast<uint8_t*>(out));
}

Status ModelRunner::import_state(const SequenceKv& seq, const void* in) {
  // copy_state only reads `in` when importing.
  return copy_state(seq, false, static_cast<uint8_t*>(const_cast<void*>(in)));
}

}  // namespace tessera::engine
