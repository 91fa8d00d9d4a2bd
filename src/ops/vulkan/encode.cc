#include "ops/vulkan/encode.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "ops/op_tensors.h"

namespace tessera::ops::vulkan {
namespace {

// Attention scores of one pass at most: large batches of long contexts run in several passes.
constexpr size_t kScratchCap = size_t{64} << 20;

// The byte alignment a view needs: whole 32-bit words for f32 / i32, 16-bit fields for everything else.
size_t view_align(DType t) { return t == DType::kF32 || t == DType::kI32 ? 4 : 2; }

// Positions one attention operator may read per query (the scratch row of one workgroup).
int64_t max_ctx(const Op& op) {
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) return a->start_pos + a->q.dim(0);
  if (const auto* d = std::get_if<AttentionDecodeOp>(&op)) return d->block_tables.dim(1) * d->k_cache.dim(1);
  return 0;
}
int64_t attention_items(const Op& op) {
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) return a->q.dim(0) * a->q.dim(1);
  if (const auto* d = std::get_if<AttentionDecodeOp>(&op)) return d->q.dim(0) * d->q.dim(1);
  return 0;
}
// Bytes of one row's gated hidden units (k slots of ff, f32); moe_experts runs as many rows per pass as the
// scratch holds.
int64_t moe_slot_bytes(const MoeExpertsOp& o) {
  const Tensor& gw = o.gate_up.valid() ? o.gate_up : o.gate;
  const int64_t ff = o.gate_up.valid() ? gw.dim(1) / 2 : gw.dim(1);
  return o.ids.dim(1) * ff * 4;
}
int64_t moe_rows_per_pass(const Gpu& gpu, const MoeExpertsOp& o) {
  const size_t cap = std::min<size_t>(kScratchCap, gpu.max_range());
  return std::max<int64_t>(1, static_cast<int64_t>(cap / static_cast<size_t>(moe_slot_bytes(o))));
}
size_t items_per_pass(const Gpu& gpu, int64_t ctx) {
  const size_t cap = std::min<size_t>(kScratchCap, gpu.max_range());
  return std::max<size_t>(1, cap / (static_cast<size_t>(std::max<int64_t>(ctx, 1)) * 4));
}

// Rows of a weight matrix or embedding table one dispatch binds: all of them when the tensor fits one
// storage-buffer binding, else as many as do (a window starts up to range_align() bytes early). 0 when not
// even one row fits.
int64_t rows_per_slice(const Gpu& gpu, const Tensor& t) {
  if (gpu.window(t).ok()) return t.dim(0);
  const size_t room = gpu.max_range() > gpu.range_align() + 16 ? gpu.max_range() - gpu.range_align() - 16 : 0;
  return static_cast<int64_t>(room / std::max<size_t>(t.row_bytes(), 1));
}
// Tensors an operator may read in slices of rows (so they may exceed one binding).
bool sliced(const Op& op, const Tensor& t) {
  if (const auto* mm = std::get_if<MatMulOp>(&op)) return &t == &mm->w;
  if (const auto* e = std::get_if<EmbeddingOp>(&op)) return &t == &e->table;
  return false;
}

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
// Offset of a tensor inside its window in units of `unit` bytes.
uint32_t off(const Window& w, size_t unit) { return w.rel / static_cast<uint32_t>(unit); }
uint32_t dtype_code(DType t) { return static_cast<uint32_t>(t); }
// A KV cache's type as kv_write.comp and attention.comp take it (ctype), 5 for one they do not.
uint32_t cache_type_code(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kBF16:
      return 2;
    case DType::kQ8_0:
      return 3;
    case DType::kQ4_0:
      return 4;
    default:
      return 5;
  }
}
bool is_block_cache(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }
// The unit of a cache offset in the shaders' push constants: elements, or bytes for the block types.
size_t cache_unit(DType t) { return is_block_cache(t) ? 1 : t == DType::kF32 ? 4 : 2; }

}  // namespace

Support capability(const Gpu& gpu, const Op& op) {
  if (Status s = validate(op); !s.ok()) return Support::no(s.message());
  std::string problem;
  for_each_tensor(op, [&](const Tensor& t) {
    if (!problem.empty() || !t.valid()) return;
    if (t.offset % view_align(t.dtype) != 0) {
      problem = fmt::format("vulkan needs {} views at a multiple of {} bytes (offset {})", dtype_name(t.dtype),
                            view_align(t.dtype), t.offset);
      return;
    }
    if (sliced(op, t)) {
      if (rows_per_slice(gpu, t) < 1)
        problem = fmt::format("vulkan: one row of {} is larger than the device's largest binding", t.shape_string());
      return;
    }
    if (auto w = gpu.window(t); !w.ok()) problem = w.status().message();
  });
  if (!problem.empty()) return Support::no(problem);
  if (const auto* mm = std::get_if<MatMulOp>(&op)) {
    if (mm->w.dtype == DType::kI32) return Support::no("vulkan matmul does not take i32 weights");
    const uint64_t tiles_m = (mm->w.dim(0) + kMatMulTile - 1) / kMatMulTile;
    const uint64_t tiles_n = (mm->x.dim(0) + kMatMulTile - 1) / kMatMulTile;
    if (tiles_m > gpu.limits().maxComputeWorkGroupCount[0] || tiles_n > gpu.limits().maxComputeWorkGroupCount[1])
      return Support::no("vulkan: the matmul has more tiles than the device's grid");
  }
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op); a && a->sinks.valid() && a->sinks.dtype != DType::kF32)
    return Support::no("vulkan attention takes f32 sinks");
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op); a && a->sinks.valid() && a->sinks.dtype != DType::kF32)
    return Support::no("vulkan attention takes f32 sinks");
  if (const auto* m = std::get_if<MoeExpertsOp>(&op)) {
    if (static_cast<size_t>(moe_slot_bytes(*m)) > std::min<size_t>(kScratchCap, gpu.max_range()))
      return Support::no("vulkan: one row's expert hidden units are larger than moe_experts' scratch");
  }
  if (const auto* a = std::get_if<AttentionNonCausalOp>(&op); a && a->q.dim(2) > kAttentionMaxHeadDim)
    return Support::no(fmt::format("vulkan attention takes head_dim up to {}", kAttentionMaxHeadDim));
  const Tensor* cache = nullptr;
  if (const auto* kv = std::get_if<KvWriteOp>(&op)) {
    cache = &kv->k_cache;
    if (kv->k.row_elems() % 2 != 0) return Support::no("vulkan kv_write needs rows of an even number of elements");
    if (kv->k_cache.offset % 4 != 0 || kv->v_cache.offset % 4 != 0)
      return Support::no("vulkan kv_write needs cache views at a multiple of 4 bytes");
    // Two blocks per invocation, written as whole words.
    if (is_block_cache(kv->k_cache.dtype) && kv->k.row_elems() % 64 != 0)
      return Support::no("vulkan kv_write into a block cache needs an even number of blocks per token");
  }
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) cache = &a->k_cache;
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) cache = &a->k_cache;
  if (cache && cache_type_code(cache->dtype) > 4u)
    return Support::no(
        fmt::format("vulkan keeps the KV cache in f32, f16, bf16, q8_0 or q4_0, not {}", dtype_name(cache->dtype)));
  if (cache && !std::holds_alternative<KvWriteOp>(op)) {
    if (cache->dim(3) > kAttentionMaxHeadDim)
      return Support::no(fmt::format("vulkan attention takes head_dim up to {}", kAttentionMaxHeadDim));
    if (static_cast<size_t>(max_ctx(op)) * 4 > std::min<size_t>(kScratchCap, gpu.max_range()))
      return Support::no("vulkan: the attention context is longer than one pass's score scratch");
  }
  return Support::yes();
}

size_t scratch_bytes(const Gpu& gpu, const Op& op) {
  if (const auto* m = std::get_if<MoeExpertsOp>(&op)) {
    return static_cast<size_t>(std::min(moe_rows_per_pass(gpu, *m), m->x.dim(0)) * moe_slot_bytes(*m));
  }
  const int64_t ctx = max_ctx(op), items = attention_items(op);
  if (ctx == 0 || items == 0) return 0;
  const size_t per = items_per_pass(gpu, ctx);
  return std::min<size_t>(per, static_cast<size_t>(items)) * static_cast<size_t>(ctx) * 4;
}

namespace {

struct Encoder {
  EncodeTarget& t;
  Gpu& gpu() { return t.writer.gpu(); }
  Result<Window> win(const Tensor& x) { return gpu().window(x); }

  // A table larger than one binding is looked up slice by slice (each dispatch writes the rows whose ids
  // fall in its slice).
  Status operator()(const EmbeddingOp& o) {
    TS_ASSIGN_OR_RETURN(Window ids, win(o.ids));
    TS_ASSIGN_OR_RETURN(Window out, win(o.out));
    const int64_t vocab = o.table.dim(0), per = rows_per_slice(gpu(), o.table);
    const uint64_t invocations = static_cast<uint64_t>(o.ids.dim(0)) * ((o.table.dim(1) + 3) / 4);
    for (int64_t base = 0; base < vocab; base += per) {
      const int64_t count = std::min(per, vocab - base);
      TS_ASSIGN_OR_RETURN(Window table, win(o.table.rows(base, count)));
      const EmbeddingPush p{table.rel,
                            off(ids, 4),
                            off(out, 4),
                            u32(o.table.dim(1)),
                            u32(vocab),
                            u32(o.ids.dim(0)),
                            u32(o.table.row_bytes()),
                            o.scale,
                            u32(base),
                            u32(count),
                            base == 0 ? 1u : 0u};
      TS_RETURN_IF_ERROR(t.writer.dispatch(Kernel::kEmbedding, dtype_code(o.table.dtype), {table, ids, out, t.error},
                                           &p, sizeof p, (invocations + kLinearWorkgroup - 1) / kLinearWorkgroup));
    }
    return ok_status();
  }
  Status norm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& out, float eps, bool add) {
    TS_ASSIGN_OR_RETURN(Window xw, win(x));
    TS_ASSIGN_OR_RETURN(Window dw, win(delta));
    TS_ASSIGN_OR_RETURN(Window ww, win(w));
    TS_ASSIGN_OR_RETURN(Window ow, win(out));
    const RmsNormPush p{off(xw, 4),    off(dw, 4),    off(ww, 4),    off(ow, 4),
                        u32(x.dim(1)), u32(x.dim(0)), add ? 1u : 0u, eps};
    return t.writer.dispatch(Kernel::kRmsNorm, 0, {xw, dw, ww, ow}, &p, sizeof p, static_cast<uint64_t>(x.dim(0)));
  }
  Status operator()(const RmsNormOp& o) { return norm(o.x, o.x, o.weight, o.out, o.eps, false); }
  Status operator()(const AddRmsNormOp& o) { return norm(o.residual, o.delta, o.weight, o.out, o.eps, true); }
  Status operator()(const RopeOp& o) {
    TS_ASSIGN_OR_RETURN(Window q, win(o.q));
    TS_ASSIGN_OR_RETURN(Window k, win(o.k));
    TS_ASSIGN_OR_RETURN(Window pos, win(o.positions));
    const int64_t rot = o.rotated(o.q.dim(2));
    Window freqs;
    if (o.freqs.valid()) {
      TS_ASSIGN_OR_RETURN(freqs, win(o.freqs));
    } else {
      TS_ASSIGN_OR_RETURN(freqs, gpu().rope_table(o.theta, rot));
    }
    const RopePush p{off(q, 4),
                     off(k, 4),
                     off(pos, 4),
                     off(freqs, 4),
                     u32(o.q.dim(1)),
                     u32(o.k.dim(1)),
                     u32(o.q.dim(2)),
                     u32(o.q.dim(0)),
                     o.layout == RopeLayout::kInterleaved ? 1u : 0u,
                     o.freqs.valid() ? 1u : 0u,
                     o.mscale,
                     u32(rot)};
    const uint64_t invocations = static_cast<uint64_t>(o.q.dim(0)) * static_cast<uint64_t>(rot / 2);
    return t.writer.dispatch(Kernel::kRope, 0, {q, k, pos, freqs}, &p, sizeof p,
                             (invocations + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status operator()(const KvWriteOp& o) {
    TS_ASSIGN_OR_RETURN(Window k, win(o.k));
    TS_ASSIGN_OR_RETURN(Window v, win(o.v));
    TS_ASSIGN_OR_RETURN(Window kc, win(o.k_cache));
    TS_ASSIGN_OR_RETURN(Window vc, win(o.v_cache));
    TS_ASSIGN_OR_RETURN(Window slots, win(o.slots));
    const size_t unit = cache_unit(o.k_cache.dtype);
    const KvWritePush p{off(k, 4),
                        off(v, 4),
                        off(kc, unit),
                        off(vc, unit),
                        off(slots, 4),
                        u32(o.k.row_elems()),
                        u32(o.k_cache.dim(0) * o.k_cache.dim(1)),
                        u32(o.k.dim(0)),
                        cache_type_code(o.k_cache.dtype)};
    const int64_t per_token = is_block_cache(o.k_cache.dtype) ? o.k.row_elems() / 64 : o.k.row_elems() / 2;
    const uint64_t invocations = static_cast<uint64_t>(o.k.dim(0)) * static_cast<uint64_t>(per_token);
    return t.writer.dispatch(Kernel::kKvWrite, 0, {k, v, kc, vc, slots, t.error}, &p, sizeof p,
                             (invocations + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status attention(const Op& op, const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& tables,
                   int64_t table_stride, const Tensor& lens, int32_t start_pos, bool decode, const Tensor& out,
                   const AttentionScores& s, const Tensor& sinks) {
    TS_ASSIGN_OR_RETURN(Window qw, win(q));
    TS_ASSIGN_OR_RETURN(Window kw, win(kc));
    TS_ASSIGN_OR_RETURN(Window vw, win(vc));
    TS_ASSIGN_OR_RETURN(Window tw, win(tables));
    TS_ASSIGN_OR_RETURN(Window lw, win(lens));
    TS_ASSIGN_OR_RETURN(Window ow, win(out));
    Window sw = qw;  // bound but not read without sinks
    if (sinks.valid()) {
      TS_ASSIGN_OR_RETURN(sw, win(sinks));
    }
    const int64_t ctx = max_ctx(op), items = attention_items(op);
    const size_t per = items_per_pass(gpu(), ctx);
    TS_ASSIGN_OR_RETURN(Window scratch, t.scratch(scratch_bytes(gpu(), op)));
    const size_t unit = cache_unit(kc.dtype);
    for (int64_t base = 0; base < items; base += static_cast<int64_t>(per)) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(per), items - base);
      const AttentionPush p{off(qw, 4),
                            off(kw, unit),
                            off(vw, unit),
                            off(tw, 4),
                            off(lw, 4),
                            off(ow, 4),
                            u32(table_stride),
                            decode ? 1u : 0u,
                            start_pos,
                            u32(ctx),
                            u32(q.dim(1)),
                            u32(kc.dim(2)),
                            u32(kc.dim(3)),
                            u32(kc.dim(1)),
                            u32(kc.dim(0)),
                            s.scale,
                            s.softcap,
                            s.window,
                            cache_type_code(kc.dtype),
                            u32(base),
                            u32(n),
                            sinks.valid() ? off(sw, 4) : 0u,
                            sinks.valid() ? 1u : 0u};
      TS_RETURN_IF_ERROR(t.writer.dispatch(Kernel::kAttention, 0, {qw, kw, vw, tw, lw, ow, scratch, t.error, sw}, &p,
                                           sizeof p, static_cast<uint64_t>(n)));
    }
    return ok_status();
  }
  Status operator()(const AttentionPrefillOp& o) {
    return attention(Op{o}, o.q, o.k_cache, o.v_cache, o.block_table, o.block_table.dim(0), o.block_table, o.start_pos,
                     false, o.out, o.scores, o.sinks);
  }
  Status operator()(const AttentionDecodeOp& o) {
    return attention(Op{o}, o.q, o.k_cache, o.v_cache, o.block_tables, o.block_tables.dim(1), o.context_lens, 0, true,
                     o.out, o.scores, o.sinks);
  }
  // A weight larger than one binding (a big vocabulary's classifier on lavapipe's 128 MiB) is multiplied in
  // slices of rows, each writing its columns of out.
  Status operator()(const MatMulOp& o) {
    TS_ASSIGN_OR_RETURN(Window x, win(o.x));
    TS_ASSIGN_OR_RETURN(Window out, win(o.out));
    Window bias = x;
    if (o.bias.valid()) {
      TS_ASSIGN_OR_RETURN(bias, win(o.bias));
    }
    const int64_t n = o.x.dim(0), k = o.x.dim(1), m = o.w.dim(0), per = rows_per_slice(gpu(), o.w);
    const uint32_t type = dtype_code(o.w.dtype);
    for (int64_t base = 0; base < m; base += per) {
      const int64_t rows = std::min(per, m - base);
      TS_ASSIGN_OR_RETURN(Window w, win(o.w.rows(base, rows)));
      const MatMulPush p{off(x, 4),
                         w.rel,
                         off(out, 4) + u32(base),
                         o.bias.valid() ? off(bias, 4) + u32(base) : 0u,
                         o.bias.valid() ? 1u : 0u,
                         u32(k),
                         u32(rows),
                         u32(n),
                         u32(o.w.row_bytes()),
                         u32(m)};
      if (n <= kMatMulVecMaxRows) {
        const Kernel kern = gpu().subgroups() ? Kernel::kMatMulVecSubgroups : Kernel::kMatMulVec;
        TS_RETURN_IF_ERROR(
            t.writer.dispatch(kern, type, {x, w, out, bias}, &p, sizeof p,
                              static_cast<uint64_t>((rows + kMatMulVecRowsPerGroup - 1) / kMatMulVecRowsPerGroup)));
      } else {
        TS_RETURN_IF_ERROR(t.writer.dispatch_2d(Kernel::kMatMulTiled, type, {x, w, out, bias}, &p, sizeof p,
                                                u32((rows + kMatMulTile - 1) / kMatMulTile),
                                                u32((n + kMatMulTile - 1) / kMatMulTile)));
      }
    }
    return ok_status();
  }
  // a may hold one element per row of b (the sigmoid gate of Qwen3.5-MoE's shared expert).
  Status elementwise(const Tensor& a, const Tensor& b, const Tensor& out, uint32_t code, float scale = 1.0f) {
    TS_ASSIGN_OR_RETURN(Window aw, win(a));
    TS_ASSIGN_OR_RETURN(Window bw, win(b));
    TS_ASSIGN_OR_RETURN(Window ow, win(out));
    const int64_t per = a.numel() == b.numel() ? 1 : b.row_elems();
    const ElementwisePush p{off(aw, 4), off(bw, 4), off(ow, 4), u32(b.numel()), code, u32(per), scale};
    return t.writer.dispatch(Kernel::kElementwise, 0, {aw, bw, ow}, &p, sizeof p,
                             (static_cast<uint64_t>(b.numel()) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status operator()(const SiluMulOp& o) {
    const uint32_t code = o.act == Activation::kGeluTanh ? 1u : o.act == Activation::kSigmoid ? 3u : 0u;
    return elementwise(o.gate, o.up, o.out, code);
  }
  Status operator()(const AddOp& o) { return elementwise(o.a, o.b, o.out, 2u); }
  Status operator()(const ScaleOp& o) { return elementwise(o.x, o.x, o.out, 4u, o.scale); }
  Status operator()(const ActivationOp& o) {
    const uint32_t code = o.act == Activation::kGeluErf    ? 7u
                          : o.act == Activation::kGeluTanh ? 6u
                          : o.act == Activation::kTanh     ? 8u
                                                           : 5u;
    return elementwise(o.x, o.x, o.out, code);
  }
  Status operator()(const LayerNormOp& o) {
    TS_ASSIGN_OR_RETURN(Window xw, win(o.x));
    TS_ASSIGN_OR_RETURN(Window ww, win(o.weight));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    Window bw = ww;  // bound but not read without a bias
    if (o.bias.valid()) {
      TS_ASSIGN_OR_RETURN(bw, win(o.bias));
    }
    const LayerNormPush p{off(xw, 4),      off(ww, 4),      o.bias.valid() ? off(bw, 4) : 0u, off(ow, 4),
                          u32(o.x.dim(1)), u32(o.x.dim(0)), o.bias.valid() ? 1u : 0u,         o.eps};
    return t.writer.dispatch(Kernel::kLayerNorm, 0, {xw, ww, bw, ow}, &p, sizeof p, static_cast<uint64_t>(o.x.dim(0)));
  }
  Status operator()(const AttentionNonCausalOp& o) {
    TS_ASSIGN_OR_RETURN(Window qw, win(o.q));
    TS_ASSIGN_OR_RETURN(Window kw, win(o.k));
    TS_ASSIGN_OR_RETURN(Window vw, win(o.v));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    const int64_t hd = o.q.dim(2);
    const float scale = o.scale > 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(hd));
    const AttentionNonCausalPush p{off(qw, 4),      off(kw, 4),      off(vw, 4), off(ow, 4), u32(o.q.dim(0)),
                                   u32(o.q.dim(1)), u32(o.k.dim(1)), u32(hd),    scale};
    return t.writer.dispatch(Kernel::kAttentionNonCausal, 0, {qw, kw, vw, ow}, &p, sizeof p,
                             static_cast<uint64_t>(o.q.dim(0) * o.q.dim(1)));
  }
  Status operator()(const PoolOp& o) {
    TS_ASSIGN_OR_RETURN(Window xw, win(o.x));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    const uint32_t kind = o.kind == PoolKind::kMean ? 0u : o.kind == PoolKind::kFirst ? 1u : 2u;
    const PoolPush p{off(xw, 4), off(ow, 4), u32(o.x.dim(0)), u32(o.x.dim(1)), kind};
    return t.writer.dispatch(Kernel::kPool, 0, {xw, ow}, &p, sizeof p,
                             (static_cast<uint64_t>(o.x.dim(1)) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status rows(Kernel k, const Tensor& x, const Tensor& out) {
    TS_ASSIGN_OR_RETURN(Window xw, win(x));
    TS_ASSIGN_OR_RETURN(Window ow, win(out));
    const RowPush p{off(xw, 4), off(ow, 4), u32(x.dim(1)), u32(x.dim(0))};
    return t.writer.dispatch(k, 0, {xw, ow}, &p, sizeof p, static_cast<uint64_t>(x.dim(0)));
  }
  Status operator()(const SoftmaxOp& o) { return rows(Kernel::kSoftmax, o.x, o.out); }
  Status operator()(const ArgmaxOp& o) { return rows(Kernel::kArgmax, o.x, o.out); }
  Status operator()(const MoeRouteOp& o) {
    TS_ASSIGN_OR_RETURN(Window lw, win(o.logits));
    TS_ASSIGN_OR_RETURN(Window iw, win(o.ids));
    TS_ASSIGN_OR_RETURN(Window ww, win(o.weights));
    Window bw = lw, sw = lw;  // bound but not read without a bias or expert scales
    if (o.bias.valid()) {
      TS_ASSIGN_OR_RETURN(bw, win(o.bias));
    }
    if (o.expert_scale.valid()) {
      TS_ASSIGN_OR_RETURN(sw, win(o.expert_scale));
    }
    const uint32_t gating = o.gating == MoeGating::kSoftmax ? 0u : o.gating == MoeGating::kSigmoid ? 1u : 2u;
    const MoeRoutePush p{off(lw, 4),
                         o.bias.valid() ? off(bw, 4) : 0u,
                         off(iw, 4),
                         off(ww, 4),
                         u32(o.logits.dim(0)),
                         u32(o.logits.dim(1)),
                         u32(o.ids.dim(1)),
                         gating,
                         o.normalize ? 1u : 0u,
                         o.bias.valid() ? 1u : 0u,
                         o.scale,
                         o.expert_scale.valid() ? off(sw, 4) : 0u,
                         o.expert_scale.valid() ? 1u : 0u};
    return t.writer.dispatch(Kernel::kMoeRoute, 0, {lw, bw, iw, ww, sw}, &p, sizeof p,
                             (static_cast<uint64_t>(o.logits.dim(0)) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  // Two dispatches per pass of rows: every (row, slot, hidden unit) into the scratch, then every (row, output) as
  // the weighted sum over the row's slots. Each invocation reads its expert's rows (no grouping by expert).
  Status operator()(const MoeExpertsOp& o) {
    const bool fused = o.gate_up.valid();
    const Tensor& gate = fused ? o.gate_up : o.gate;
    TS_ASSIGN_OR_RETURN(Window xw, win(o.x));
    TS_ASSIGN_OR_RETURN(Window iw, win(o.ids));
    TS_ASSIGN_OR_RETURN(Window ww, win(o.weights));
    TS_ASSIGN_OR_RETURN(Window gw, win(gate));
    TS_ASSIGN_OR_RETURN(Window uw, fused ? win(gate) : win(o.up));
    TS_ASSIGN_OR_RETURN(Window dw, win(o.down));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    Window gbw = xw, ubw = xw, dbw = xw;  // bound but not read without biases
    if (o.gate_bias.valid()) {
      TS_ASSIGN_OR_RETURN(gbw, win(o.gate_bias));
    }
    if (o.up_bias.valid()) {
      TS_ASSIGN_OR_RETURN(ubw, win(o.up_bias));
    }
    if (o.down_bias.valid()) {
      TS_ASSIGN_OR_RETURN(dbw, win(o.down_bias));
    }
    TS_ASSIGN_OR_RETURN(Window hw, t.scratch(scratch_bytes(gpu(), Op{o})));
    const int64_t n = o.x.dim(0), dim = o.x.dim(1), k = o.ids.dim(1), experts = gate.dim(0);
    const int64_t ff = fused ? gate.dim(1) / 2 : gate.dim(1), per = moe_rows_per_pass(gpu(), o);
    // Bytes of one matrix row (a tensor's row_bytes() is a whole expert here).
    const uint32_t gate_row = u32(static_cast<int64_t>(dtype_bytes(gate.dtype, static_cast<size_t>(dim))));
    const uint32_t down_row = u32(static_cast<int64_t>(dtype_bytes(o.down.dtype, static_cast<size_t>(ff))));
    const uint32_t act = o.act == Activation::kGeluTanh ? 1u : o.act == Activation::kSwigluOai ? 2u : 0u;
    for (int64_t base = 0; base < n; base += per) {
      const int64_t rows = std::min(per, n - base);
      const MoeGateUpPush gp{off(xw, 4),
                             off(iw, 4),
                             gw.rel,
                             fused ? gw.rel + u32(ff) * gate_row : uw.rel,
                             o.gate_bias.valid() ? off(gbw, 4) : 0u,
                             o.up_bias.valid() ? off(ubw, 4) : 0u,
                             off(hw, 4),
                             o.gate_bias.valid() ? 1u : 0u,
                             o.up_bias.valid() ? 1u : 0u,
                             u32(base),
                             u32(rows),
                             u32(k),
                             u32(dim),
                             u32(ff),
                             u32(experts),
                             u32((fused ? 2 : 1) * ff) * gate_row,
                             gate_row,
                             act,
                             o.alpha,
                             o.limit};
      const uint64_t units = static_cast<uint64_t>(rows * k * ff);
      TS_RETURN_IF_ERROR(t.writer.dispatch(Kernel::kMoeGateUp, dtype_code(gate.dtype),
                                           {xw, iw, gw, uw, gbw, ubw, hw, t.error}, &gp, sizeof gp,
                                           (units + kLinearWorkgroup - 1) / kLinearWorkgroup));
      const MoeDownPush dp{off(hw, 4),
                           off(iw, 4),
                           off(ww, 4),
                           dw.rel,
                           o.down_bias.valid() ? off(dbw, 4) : 0u,
                           off(ow, 4),
                           o.down_bias.valid() ? 1u : 0u,
                           u32(base),
                           u32(rows),
                           u32(k),
                           u32(dim),
                           u32(ff),
                           u32(experts),
                           u32(dim) * down_row,
                           down_row};
      const uint64_t outs = static_cast<uint64_t>(rows * dim);
      TS_RETURN_IF_ERROR(t.writer.dispatch(Kernel::kMoeDown, dtype_code(o.down.dtype), {hw, iw, ww, dw, dbw, ow}, &dp,
                                           sizeof dp, (outs + kLinearWorkgroup - 1) / kLinearWorkgroup));
    }
    return ok_status();
  }
  Status operator()(const SplitHeadsOp& o) {
    TS_ASSIGN_OR_RETURN(Window xw, win(o.x));
    TS_ASSIGN_OR_RETURN(Window aw, win(o.a));
    TS_ASSIGN_OR_RETURN(Window bw, win(o.b));
    const SplitHeadsPush p{off(xw, 4), off(aw, 4), off(bw, 4), u32(o.a.dim(2)), u32(o.a.numel())};
    return t.writer.dispatch(Kernel::kSplitHeads, 0, {xw, aw, bw}, &p, sizeof p,
                             (static_cast<uint64_t>(o.a.numel()) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status operator()(const CausalConv1dOp& o) {
    TS_ASSIGN_OR_RETURN(Window xw, win(o.x));
    TS_ASSIGN_OR_RETURN(Window ww, win(o.weight));
    TS_ASSIGN_OR_RETURN(Window sw, win(o.state));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    const CausalConv1dPush p{off(xw, 4),      off(ww, 4),      off(sw, 4),           off(ow, 4),
                             u32(o.x.dim(0)), u32(o.x.dim(1)), u32(o.weight.dim(1)), o.reset ? 1u : 0u};
    return t.writer.dispatch(Kernel::kCausalConv1d, 0, {xw, ww, sw, ow}, &p, sizeof p,
                             (static_cast<uint64_t>(o.x.dim(1)) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
  Status operator()(const GatedDeltaRuleOp& o) {
    TS_ASSIGN_OR_RETURN(Window qw, win(o.qkv));
    TS_ASSIGN_OR_RETURN(Window aw, win(o.alpha));
    TS_ASSIGN_OR_RETURN(Window bw, win(o.beta));
    TS_ASSIGN_OR_RETURN(Window dw, win(o.dt_bias));
    TS_ASSIGN_OR_RETURN(Window gw, win(o.a));
    TS_ASSIGN_OR_RETURN(Window sw, win(o.state));
    TS_ASSIGN_OR_RETURN(Window ow, win(o.out));
    const int64_t hv = o.state.dim(0), s = o.state.dim(1);
    const GatedDeltaRulePush p{off(qw, 4),     off(aw, 4),
                               off(bw, 4),     off(dw, 4),
                               off(gw, 4),     off(sw, 4),
                               off(ow, 4),     u32(o.qkv.dim(0)),
                               u32(hv),        u32(s),
                               u32(o.k_heads), o.reset ? 1u : 0u,
                               o.eps,          1.0f / std::sqrt(static_cast<float>(s))};
    return t.writer.dispatch(Kernel::kGatedDeltaRule, 0, {qw, aw, bw, dw, gw, sw, ow}, &p, sizeof p,
                             (static_cast<uint64_t>(hv * s) + kLinearWorkgroup - 1) / kLinearWorkgroup);
  }
};

}  // namespace

Status encode(const Op& op, EncodeTarget& target) {
  Encoder e{target};
  return std::visit(e, op);
}

}  // namespace tessera::ops::vulkan
