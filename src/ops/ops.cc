#include "ops/ops.h"

#include <cmath>

#include <fmt/format.h>

#include "ops/backend.h"

namespace tessera::ops {
namespace {

template <class>
constexpr bool kAlwaysFalse = false;

// Accumulates the first problem found; later checks are skipped once one fails.
class Checker {
 public:
  explicit Checker(std::string_view op) : op_(op) {}

  Checker& present(const Tensor& t, std::string_view name) {
    if (ok() && !t.valid()) fail(fmt::format("{} is missing", name));
    if (ok() && t.buffer->size() < t.offset + t.bytes()) {
      fail(fmt::format("{} {} at offset {} runs past its {}-byte buffer", name, t.shape_string(), t.offset,
                       t.buffer->size()));
    }
    return *this;
  }
  Checker& dtype(const Tensor& t, std::string_view name, DType want) {
    if (ok() && t.dtype != want)
      fail(fmt::format("{} is {}, expected {}", name, dtype_name(t.dtype), dtype_name(want)));
    return *this;
  }
  Checker& rank(const Tensor& t, std::string_view name, int want) {
    if (ok() && t.rank != want)
      fail(fmt::format("{} {} has rank {}, expected {}", name, t.shape_string(), t.rank, want));
    return *this;
  }
  Checker& dim(const Tensor& t, std::string_view name, int i, int64_t want) {
    if (ok() && t.dim(i) != want) {
      fail(fmt::format("{} {} has dim {} = {}, expected {}", name, t.shape_string(), i, t.dim(i), want));
    }
    return *this;
  }
  Checker& same_shape(const Tensor& a, std::string_view an, const Tensor& b, std::string_view bn) {
    if (ok() && (a.rank != b.rank || a.dims != b.dims)) {
      fail(fmt::format("{} {} and {} {} differ in shape", an, a.shape_string(), bn, b.shape_string()));
    }
    return *this;
  }
  Checker& require(bool cond, std::string_view what) {
    if (ok() && !cond) fail(std::string(what));
    return *this;
  }
  bool ok() const { return error_.empty(); }
  Status status() const { return ok() ? ok_status() : invalid_argument(fmt::format("{}: {}", op_, error_)); }

 private:
  void fail(std::string e) { error_ = std::move(e); }
  std::string_view op_;
  std::string error_;
};

void check_kv_cache(Checker& c, const Tensor& kc, const Tensor& vc) {
  // A block-quantised cache (q8_0, q4_0) holds each kv head's row of head_dim elements as whole blocks.
  const int64_t block = kc.valid() && kc.rank == 4 ? dtype_info(kc.dtype).block_elems : 1;
  if (block > 1 && kc.dim(3) % block != 0) {
    c.require(false, fmt::format("a {} KV cache needs head_dim a multiple of {} (its block size), not {}",
                                 dtype_name(kc.dtype), block, kc.dim(3)));
  }
  c.present(kc, "k_cache").present(vc, "v_cache").rank(kc, "k_cache", 4).same_shape(kc, "k_cache", vc, "v_cache");
  c.dtype(vc, "v_cache", kc.dtype);
}

// q [n, heads, head_dim] against a cache [blocks, block_tokens, kv_heads, head_dim].
void check_attention_q(Checker& c, const Tensor& q, const Tensor& kc, const Tensor& out) {
  c.present(q, "q").present(out, "out").dtype(q, "q", DType::kF32).dtype(out, "out", DType::kF32).rank(q, "q", 3);
  if (!c.ok()) return;
  c.dim(q, "q", 2, kc.dim(3)).require(q.dim(1) % kc.dim(2) == 0, "query heads are not a multiple of kv heads");
  c.same_shape(q, "q", out, "out");
}

void check_scores(Checker& c, const AttentionScores& s) {
  c.require(std::isfinite(s.scale) && s.scale >= 0.0f, "scores.scale must be finite and >= 0");
  c.require(std::isfinite(s.softcap) && s.softcap >= 0.0f, "scores.softcap must be finite and >= 0");
  c.require(s.window >= 0, "scores.window must be >= 0");
}

// Optional attention sinks: one f32 logit per query head.
void check_sinks(Checker& c, const Tensor& sinks, const Tensor& q) {
  if (!sinks.valid() || !c.ok()) return;
  c.present(sinks, "sinks").dtype(sinks, "sinks", DType::kF32).rank(sinks, "sinks", 1);
  if (c.ok()) c.dim(sinks, "sinks", 0, q.dim(1));
}

void validate_encoder_op(Checker& c, const LayerNormOp& o) {
  c.present(o.x, "x").present(o.weight, "weight").present(o.out, "out").rank(o.x, "x", 2);
  c.dtype(o.x, "x", DType::kF32).dtype(o.weight, "weight", DType::kF32).same_shape(o.x, "x", o.out, "out");
  c.dtype(o.out, "out", DType::kF32).require(std::isfinite(o.eps) && o.eps > 0.0f, "eps must be positive");
  if (c.ok()) c.rank(o.weight, "weight", 1).dim(o.weight, "weight", 0, o.x.dim(1));
  if (c.ok() && o.bias.valid()) {
    c.present(o.bias, "bias").dtype(o.bias, "bias", DType::kF32).rank(o.bias, "bias", 1);
    if (c.ok()) c.dim(o.bias, "bias", 0, o.x.dim(1));
  }
}

void validate_encoder_op(Checker& c, const ActivationOp& o) {
  c.present(o.x, "x").present(o.out, "out").dtype(o.x, "x", DType::kF32).dtype(o.out, "out", DType::kF32);
  c.same_shape(o.x, "x", o.out, "out");
  c.require(o.act == Activation::kSilu || o.act == Activation::kGeluTanh || o.act == Activation::kGeluErf ||
                o.act == Activation::kTanh,
            "act must be silu, gelu_tanh, gelu_erf or tanh");
}

void validate_encoder_op(Checker& c, const AttentionNonCausalOp& o) {
  c.present(o.q, "q").present(o.k, "k").present(o.v, "v").present(o.out, "out");
  c.dtype(o.q, "q", DType::kF32).dtype(o.k, "k", DType::kF32).dtype(o.v, "v", DType::kF32);
  c.dtype(o.out, "out", DType::kF32).rank(o.q, "q", 3).rank(o.k, "k", 3).same_shape(o.k, "k", o.v, "v");
  c.same_shape(o.q, "q", o.out, "out");
  if (!c.ok()) return;
  c.dim(o.k, "k", 0, o.q.dim(0)).dim(o.k, "k", 2, o.q.dim(2));
  c.require(o.k.dim(1) > 0 && o.q.dim(1) % o.k.dim(1) == 0, "query heads are not a multiple of kv heads");
  c.require(o.q.dim(0) > 0, "attention needs at least one token");
  c.require(std::isfinite(o.scale) && o.scale >= 0.0f, "scale must be finite and >= 0");
}

void validate_encoder_op(Checker& c, const PoolOp& o) {
  c.present(o.x, "x").present(o.out, "out").dtype(o.x, "x", DType::kF32).dtype(o.out, "out", DType::kF32);
  c.rank(o.x, "x", 2).rank(o.out, "out", 2);
  if (!c.ok()) return;
  c.require(o.x.dim(0) > 0, "pooling needs at least one row").dim(o.out, "out", 0, 1).dim(o.out, "out", 1, o.x.dim(1));
  c.require(o.kind == PoolKind::kMean || o.kind == PoolKind::kFirst || o.kind == PoolKind::kLast,
            "kind must be mean, first or last");
}

}  // namespace

std::string_view op_name(const Op& op) {
  static constexpr std::string_view kNames[] = {"embedding",
                                                "rms_norm",
                                                "add_rms_norm",
                                                "rope",
                                                "kv_write",
                                                "attention_prefill",
                                                "attention_decode",
                                                "matmul",
                                                "silu_mul",
                                                "add",
                                                "softmax",
                                                "argmax",
                                                "moe_route",
                                                "moe_experts",
                                                "layer_norm",
                                                "activation",
                                                "attention_noncausal",
                                                "pool",
                                                "split_heads",
                                                "causal_conv1d",
                                                "gated_delta_rule",
                                                "scale"};
  static_assert(std::size(kNames) == std::variant_size_v<Op>);
  return kNames[op.index()];
}

Status validate(const Op& op) {
  Checker c(op_name(op));
  std::visit(
      [&c](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, EmbeddingOp>) {
          c.present(o.table, "table").present(o.ids, "ids").present(o.out, "out");
          // The table in any storage type (a quantised one in whole blocks per row: each looked-up row is
          // widened to f32 into out), so a model's embedding can stay in its stored type.
          c.rank(o.table, "table", 2).dtype(o.ids, "ids", DType::kI32);
          c.require(o.table.dtype != DType::kI32,
                    "table must hold weights (f32, f16, bf16 or a quantised type), not i32");
          c.rank(o.ids, "ids", 1).rank(o.out, "out", 2).dtype(o.out, "out", DType::kF32);
          c.require(std::isfinite(o.scale), "scale must be finite");
          if (c.ok()) {
            c.dim(o.out, "out", 0, o.ids.dim(0)).dim(o.out, "out", 1, o.table.dim(1));
            c.require(o.table.dim(1) % dtype_info(o.table.dtype).block_elems == 0,
                      "a quantised table's rows must be whole blocks");
          }
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          c.present(o.x, "x").present(o.weight, "weight").present(o.out, "out").rank(o.x, "x", 2);
          c.dtype(o.x, "x", DType::kF32).dtype(o.weight, "weight", DType::kF32).same_shape(o.x, "x", o.out, "out");
          if (c.ok()) c.rank(o.weight, "weight", 1).dim(o.weight, "weight", 0, o.x.dim(1));
        } else if constexpr (std::is_same_v<T, AddRmsNormOp>) {
          c.present(o.residual, "residual").present(o.delta, "delta").present(o.weight, "weight").present(o.out, "out");
          c.rank(o.residual, "residual", 2)
              .dtype(o.residual, "residual", DType::kF32)
              .dtype(o.delta, "delta", DType::kF32);
          c.dtype(o.weight, "weight", DType::kF32).same_shape(o.residual, "residual", o.delta, "delta");
          c.same_shape(o.residual, "residual", o.out, "out");
          if (c.ok()) c.rank(o.weight, "weight", 1).dim(o.weight, "weight", 0, o.residual.dim(1));
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          c.present(o.q, "q").present(o.k, "k").present(o.positions, "positions").rank(o.q, "q", 3).rank(o.k, "k", 3);
          c.dtype(o.q, "q", DType::kF32).dtype(o.k, "k", DType::kF32).dtype(o.positions, "positions", DType::kI32);
          if (c.ok()) {
            c.dim(o.k, "k", 0, o.q.dim(0)).dim(o.k, "k", 2, o.q.dim(2)).rank(o.positions, "positions", 1);
            c.dim(o.positions, "positions", 0, o.q.dim(0)).require(o.q.dim(2) % 2 == 0, "head_dim must be even");
            c.require(o.theta > 0.0f, "theta must be positive");
            c.require(o.rot_dims >= 0 && o.rot_dims <= o.q.dim(2) && o.rot_dims % 2 == 0,
                      "rot_dims must be even and at most head_dim");
            if (o.freqs.valid()) {
              c.present(o.freqs, "freqs").dtype(o.freqs, "freqs", DType::kF32).rank(o.freqs, "freqs", 1);
              if (c.ok()) c.dim(o.freqs, "freqs", 0, o.rotated(o.q.dim(2)) / 2);
              c.require(std::isfinite(o.mscale) && o.mscale > 0.0f, "mscale must be positive");
            } else {
              c.require(o.mscale == 1.0f, "mscale needs freqs");
            }
          }
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          check_kv_cache(c, o.k_cache, o.v_cache);
          c.present(o.k, "k")
              .present(o.v, "v")
              .present(o.slots, "slots")
              .rank(o.k, "k", 3)
              .same_shape(o.k, "k", o.v, "v");
          c.dtype(o.k, "k", DType::kF32).dtype(o.v, "v", DType::kF32).dtype(o.slots, "slots", DType::kI32);
          if (c.ok()) {
            c.dim(o.k, "k", 1, o.k_cache.dim(2)).dim(o.k, "k", 2, o.k_cache.dim(3)).rank(o.slots, "slots", 1);
            c.dim(o.slots, "slots", 0, o.k.dim(0));
          }
        } else if constexpr (std::is_same_v<T, AttentionPrefillOp>) {
          check_kv_cache(c, o.k_cache, o.v_cache);
          check_attention_q(c, o.q, o.k_cache, o.out);
          c.present(o.block_table, "block_table").rank(o.block_table, "block_table", 1);
          c.dtype(o.block_table, "block_table", DType::kI32).require(o.start_pos >= 0, "start_pos is negative");
          check_scores(c, o.scores);
          check_sinks(c, o.sinks, o.q);
          if (c.ok()) {
            int64_t need = o.start_pos + o.q.dim(0);
            c.require(need <= o.block_table.dim(0) * o.k_cache.dim(1), "the block table does not cover every position");
          }
        } else if constexpr (std::is_same_v<T, AttentionDecodeOp>) {
          check_kv_cache(c, o.k_cache, o.v_cache);
          check_attention_q(c, o.q, o.k_cache, o.out);
          c.present(o.block_tables, "block_tables").present(o.context_lens, "context_lens");
          c.rank(o.block_tables, "block_tables", 2).dtype(o.block_tables, "block_tables", DType::kI32);
          c.rank(o.context_lens, "context_lens", 1).dtype(o.context_lens, "context_lens", DType::kI32);
          check_scores(c, o.scores);
          check_sinks(c, o.sinks, o.q);
          if (c.ok()) {
            c.dim(o.block_tables, "block_tables", 0, o.q.dim(0)).dim(o.context_lens, "context_lens", 0, o.q.dim(0));
          }
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          c.present(o.x, "x").present(o.w, "w").present(o.out, "out").rank(o.x, "x", 2).rank(o.w, "w", 2);
          c.rank(o.out, "out", 2).dtype(o.x, "x", DType::kF32).dtype(o.out, "out", DType::kF32);
          if (c.ok()) {
            c.dim(o.w, "w", 1, o.x.dim(1)).dim(o.out, "out", 0, o.x.dim(0)).dim(o.out, "out", 1, o.w.dim(0));
            c.require(o.w.dim(1) % dtype_info(o.w.dtype).block_elems == 0,
                      "w's row length is not a multiple of its quantisation block");
            if (o.bias.valid()) {
              c.present(o.bias, "bias").dtype(o.bias, "bias", DType::kF32).rank(o.bias, "bias", 1);
              if (c.ok()) c.dim(o.bias, "bias", 0, o.w.dim(0));
            }
          }
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          c.present(o.gate, "gate").present(o.up, "up").present(o.out, "out").dtype(o.gate, "gate", DType::kF32);
          c.dtype(o.up, "up", DType::kF32).same_shape(o.up, "up", o.out, "out");
          // The sigmoid gate may be one value per row ([n, 1]) for up's whole row (Qwen3.5-MoE's shared expert).
          const bool per_row = o.act == Activation::kSigmoid && o.gate.rank == 2 && o.up.rank == 2 &&
                               o.gate.dim(1) == 1 && o.gate.dim(0) == o.up.dim(0);
          if (!per_row) c.same_shape(o.gate, "gate", o.up, "up");
          c.require(o.act != Activation::kSwigluOai && o.act != Activation::kGeluErf && o.act != Activation::kTanh,
                    "silu_mul takes silu, gelu_tanh or sigmoid (swiglu_oai is moe_experts', gelu_erf and tanh "
                    "activation's)");
        } else if constexpr (std::is_same_v<T, ScaleOp>) {
          c.present(o.x, "x").present(o.out, "out").dtype(o.x, "x", DType::kF32).dtype(o.out, "out", DType::kF32);
          c.same_shape(o.x, "x", o.out, "out").require(std::isfinite(o.scale), "scale must be finite");
        } else if constexpr (std::is_same_v<T, AddOp>) {
          c.present(o.a, "a").present(o.b, "b").present(o.out, "out").dtype(o.a, "a", DType::kF32);
          c.dtype(o.b, "b", DType::kF32).same_shape(o.a, "a", o.b, "b").same_shape(o.a, "a", o.out, "out");
        } else if constexpr (std::is_same_v<T, SoftmaxOp>) {
          c.present(o.x, "x").present(o.out, "out").rank(o.x, "x", 2).dtype(o.x, "x", DType::kF32);
          c.same_shape(o.x, "x", o.out, "out");
        } else if constexpr (std::is_same_v<T, ArgmaxOp>) {
          c.present(o.x, "x").present(o.out, "out").rank(o.x, "x", 2).dtype(o.x, "x", DType::kF32);
          c.rank(o.out, "out", 1).dtype(o.out, "out", DType::kI32);
          if (c.ok()) c.dim(o.out, "out", 0, o.x.dim(0)).require(o.x.dim(1) > 0, "x has empty rows");
        } else if constexpr (std::is_same_v<T, LayerNormOp> || std::is_same_v<T, ActivationOp> ||
                             std::is_same_v<T, AttentionNonCausalOp> || std::is_same_v<T, PoolOp>) {
          validate_encoder_op(c, o);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          c.present(o.logits, "logits").present(o.ids, "ids").present(o.weights, "weights");
          c.rank(o.logits, "logits", 2).dtype(o.logits, "logits", DType::kF32).rank(o.ids, "ids", 2);
          c.dtype(o.ids, "ids", DType::kI32).dtype(o.weights, "weights", DType::kF32);
          if (c.ok()) {
            c.rank(o.weights, "weights", 2).dim(o.ids, "ids", 0, o.logits.dim(0));
            c.dim(o.weights, "weights", 0, o.logits.dim(0)).dim(o.weights, "weights", 1, o.ids.dim(1));
            c.require(o.ids.dim(1) >= 1 && o.ids.dim(1) <= o.logits.dim(1), "k (ids' columns) must be in [1, experts]");
            c.require(std::isfinite(o.scale) && o.scale > 0.0f, "scale must be positive");
            if (o.bias.valid()) {
              c.present(o.bias, "bias").dtype(o.bias, "bias", DType::kF32).rank(o.bias, "bias", 1);
              if (c.ok()) c.dim(o.bias, "bias", 0, o.logits.dim(1));
            }
            if (o.expert_scale.valid()) {
              c.present(o.expert_scale, "expert_scale").dtype(o.expert_scale, "expert_scale", DType::kF32);
              c.rank(o.expert_scale, "expert_scale", 1);
              if (c.ok()) c.dim(o.expert_scale, "expert_scale", 0, o.logits.dim(1));
            }
          }
        } else if constexpr (std::is_same_v<T, SplitHeadsOp>) {
          c.present(o.x, "x").present(o.a, "a").present(o.b, "b").rank(o.x, "x", 3).rank(o.a, "a", 3);
          c.dtype(o.x, "x", DType::kF32).dtype(o.a, "a", DType::kF32).same_shape(o.a, "a", o.b, "b");
          c.dtype(o.b, "b", DType::kF32);
          if (c.ok()) {
            c.dim(o.a, "a", 0, o.x.dim(0)).dim(o.a, "a", 1, o.x.dim(1)).dim(o.x, "x", 2, 2 * o.a.dim(2));
          }
        } else if constexpr (std::is_same_v<T, CausalConv1dOp>) {
          c.present(o.x, "x").present(o.weight, "weight").present(o.state, "state").present(o.out, "out");
          c.rank(o.x, "x", 2).rank(o.weight, "weight", 2).rank(o.state, "state", 2).dtype(o.x, "x", DType::kF32);
          c.dtype(o.weight, "weight", DType::kF32)
              .dtype(o.state, "state", DType::kF32)
              .dtype(o.out, "out", DType::kF32);
          c.same_shape(o.x, "x", o.out, "out");
          if (c.ok()) {
            c.require(o.weight.dim(1) >= 2, "the kernel needs at least 2 taps");
            c.dim(o.weight, "weight", 0, o.x.dim(1)).dim(o.state, "state", 0, o.weight.dim(1) - 1);
            c.dim(o.state, "state", 1, o.x.dim(1));
          }
        } else if constexpr (std::is_same_v<T, GatedDeltaRuleOp>) {
          c.present(o.qkv, "qkv").present(o.alpha, "alpha").present(o.beta, "beta").present(o.dt_bias, "dt_bias");
          c.present(o.a, "a").present(o.state, "state").present(o.out, "out");
          for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{o.qkv, "qkv"},
                                        {o.alpha, "alpha"},
                                        {o.beta, "beta"},
                                        {o.dt_bias, "dt_bias"},
                                        {o.a, "a"},
                                        {o.state, "state"},
                                        {o.out, "out"}})
            c.dtype(t, name, DType::kF32);
          c.rank(o.qkv, "qkv", 2).rank(o.alpha, "alpha", 2).same_shape(o.alpha, "alpha", o.beta, "beta");
          c.rank(o.dt_bias, "dt_bias", 1).same_shape(o.dt_bias, "dt_bias", o.a, "a").rank(o.state, "state", 3);
          c.rank(o.out, "out", 3).require(o.k_heads >= 1, "k_heads must be positive");
          c.require(std::isfinite(o.eps) && o.eps >= 0.0f, "eps must be finite and >= 0");
          if (c.ok()) {
            const int64_t n = o.qkv.dim(0), hv = o.state.dim(0), s = o.state.dim(1);
            c.dim(o.state, "state", 2, s).dim(o.out, "out", 0, n).dim(o.out, "out", 1, hv).dim(o.out, "out", 2, s);
            c.dim(o.alpha, "alpha", 0, n).dim(o.alpha, "alpha", 1, hv).dim(o.dt_bias, "dt_bias", 0, hv);
            c.require(hv % o.k_heads == 0, "value heads must be a multiple of k_heads");
            c.dim(o.qkv, "qkv", 1, (2 * o.k_heads + hv) * s);
          }
        } else if constexpr (std::is_same_v<T, MoeExpertsOp>) {
          c.present(o.x, "x").present(o.ids, "ids").present(o.weights, "weights").present(o.out, "out");
          c.present(o.down, "down").rank(o.down, "down", 3);
          c.require(o.act != Activation::kGeluErf && o.act != Activation::kTanh,
                    "moe_experts takes silu, gelu_tanh or swiglu_oai");
          const bool fused = o.gate_up.valid();
          if (fused) {
            c.present(o.gate_up, "gate_up").rank(o.gate_up, "gate_up", 3);
            c.require(!o.gate.valid() && !o.up.valid(), "gate_up replaces gate and up: give one or the other");
            if (c.ok()) c.require(o.gate_up.dim(1) % 2 == 0, "gate_up's rows per expert must be even (gate; up)");
          } else {
            c.present(o.gate, "gate").present(o.up, "up").rank(o.gate, "gate", 3).rank(o.up, "up", 3);
            c.same_shape(o.gate, "gate", o.up, "up").dtype(o.up, "up", o.gate.dtype);
          }
          c.rank(o.x, "x", 2).dtype(o.x, "x", DType::kF32).same_shape(o.x, "x", o.out, "out");
          c.dtype(o.out, "out", DType::kF32).rank(o.ids, "ids", 2).dtype(o.ids, "ids", DType::kI32);
          c.rank(o.weights, "weights", 2).dtype(o.weights, "weights", DType::kF32);
          if (c.ok()) {
            const Tensor& gw = fused ? o.gate_up : o.gate;
            const int64_t n = o.x.dim(0), dim = o.x.dim(1), experts = gw.dim(0), ff = fused ? gw.dim(1) / 2 : gw.dim(1);
            c.dim(o.ids, "ids", 0, n).dim(o.weights, "weights", 0, n).dim(o.weights, "weights", 1, o.ids.dim(1));
            c.require(o.ids.dim(1) >= 1, "ids needs at least one column");
            c.dim(gw, fused ? "gate_up" : "gate", 2, dim).dim(o.down, "down", 0, experts).dim(o.down, "down", 1, dim);
            c.dim(o.down, "down", 2, ff);
            c.require(gw.dtype != DType::kI32 && o.down.dtype != DType::kI32, "expert weights cannot be i32");
            c.require(dim % dtype_info(gw.dtype).block_elems == 0,
                      "gate/up rows are not a whole number of their quantisation blocks");
            c.require(ff % dtype_info(o.down.dtype).block_elems == 0,
                      "down's rows are not a whole number of its quantisation blocks");
            auto bias = [&](const Tensor& b, const char* name, int64_t width) {
              if (!b.valid()) return;
              c.present(b, name).dtype(b, name, DType::kF32).rank(b, name, 2);
              if (c.ok()) c.dim(b, name, 0, experts).dim(b, name, 1, width);
            };
            bias(o.gate_bias, "gate_bias", ff);
            bias(o.up_bias, "up_bias", ff);
            bias(o.down_bias, "down_bias", dim);
            c.require(o.act != Activation::kSigmoid, "moe_experts takes silu, gelu_tanh or swiglu_oai");
            if (o.act == Activation::kSwigluOai)
              c.require(std::isfinite(o.alpha) && std::isfinite(o.limit) && o.limit > 0.0f,
                        "swiglu_oai needs a finite alpha and a positive limit");
          }
        } else {
          static_assert(kAlwaysFalse<T>, "validate() misses an operator");
        }
      },
      op);
  return c.status();
}

Status Stream::upload(const Tensor& dst, const void* src) { return write(*dst.buffer, dst.offset, src, dst.bytes()); }
Status Stream::download(const Tensor& src, void* dst) { return read(*src.buffer, src.offset, dst, src.bytes()); }

}  // namespace tessera::ops
