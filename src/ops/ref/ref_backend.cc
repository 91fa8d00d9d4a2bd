#include "ops/ref/ref_backend.h"

#include "ops/host_memory.h"

#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

#include "ops/ref/kernels.h"

namespace tessera::ops::ref {
namespace {

class RefStream final : public Stream {
 public:
  Status run(const Op& op) override {
    TS_RETURN_IF_ERROR(validate(op));
    return std::visit(
        [](const auto& o) -> Status {
          using T = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<T, EmbeddingOp>)
            return run_embedding(o);
          else if constexpr (std::is_same_v<T, RmsNormOp>)
            return run_rms_norm(o);
          else if constexpr (std::is_same_v<T, AddRmsNormOp>)
            return run_add_rms_norm(o);
          else if constexpr (std::is_same_v<T, RopeOp>)
            return run_rope(o);
          else if constexpr (std::is_same_v<T, KvWriteOp>)
            return run_kv_write(o);
          else if constexpr (std::is_same_v<T, AttentionPrefillOp>)
            return run_attention_prefill(o);
          else if constexpr (std::is_same_v<T, AttentionDecodeOp>)
            return run_attention_decode(o);
          else if constexpr (std::is_same_v<T, MatMulOp>)
            return run_matmul(o);
          else if constexpr (std::is_same_v<T, SiluMulOp>)
            return run_silu_mul(o);
          else if constexpr (std::is_same_v<T, AddOp>)
            return run_add(o);
          else if constexpr (std::is_same_v<T, ScaleOp>)
            return run_scale(o);
          else if constexpr (std::is_same_v<T, SoftmaxOp>)
            return run_softmax(o);
          else if constexpr (std::is_same_v<T, LayerNormOp>)
            return run_layer_norm(o);
          else if constexpr (std::is_same_v<T, ActivationOp>)
            return run_activation(o);
          else if constexpr (std::is_same_v<T, AttentionNonCausalOp>)
            return run_attention_noncausal(o);
          else if constexpr (std::is_same_v<T, PoolOp>)
            return run_pool(o);
          else if constexpr (std::is_same_v<T, ArgmaxOp>)
            return run_argmax(o);
          else if constexpr (std::is_same_v<T, MoeRouteOp>)
            return run_moe_route(o);
          else if constexpr (std::is_same_v<T, SplitHeadsOp>)
            return run_split_heads(o);
          else if constexpr (std::is_same_v<T, CausalConv1dOp>)
            return run_causal_conv1d(o);
          else if constexpr (std::is_same_v<T, GatedDeltaRuleOp>)
            return run_gated_delta_rule(o);
          else
            return run_moe_experts(o);
        },
        op);
  }
  Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_host_range(dst, offset, bytes, "write"));
    std::memcpy(static_cast<uint8_t*>(dst.host_ptr()) + offset, src, bytes);
    return ok_status();
  }
  Status read(Buffer& src, size_t offset, void* dst, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_host_range(src, offset, bytes, "read"));
    std::memcpy(dst, static_cast<uint8_t*>(src.host_ptr()) + offset, bytes);
    return ok_status();
  }
  Status synchronize() override { return ok_status(); }
};

class RefDevice final : public Device {
 public:
  RefDevice() {
    info_.backend = "ref";
    info_.name = "reference (portable scalar C++)";
    info_.host_visible = true;
    info_.supports_graphs = false;
    info_.batch_invariant = true;  // plain loops, one row at a time
  }
  const DeviceInfo& info() const override { return info_; }

  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override { return alloc_host_buffer(bytes, "ref"); }

  Support supports(const Op& op) const override {
    if (Status s = validate(op); !s.ok()) return Support::no(s.message());
    if (const auto* mm = std::get_if<MatMulOp>(&op); mm && !matmul_weight_supported(mm->w.dtype)) {
      return Support::no(fmt::format("ref matmul does not take {} weights", dtype_name(mm->w.dtype)));
    }
    if (const auto* me = std::get_if<MoeExpertsOp>(&op);
        me && (!matmul_weight_supported((me->gate_up.valid() ? me->gate_up : me->gate).dtype) ||
               !matmul_weight_supported(me->down.dtype))) {
      return Support::no("ref moe_experts does not take these expert weight types");
    }
    auto cache_ok = [](const Tensor& t) { return kv_cache_supported(t.dtype); };
    const char* kCacheReason = "ref keeps the KV cache in f32, f16, bf16, q8_0 or q4_0";
    if (const auto* kv = std::get_if<KvWriteOp>(&op); kv && !cache_ok(kv->k_cache)) return Support::no(kCacheReason);
    if (const auto* a = std::get_if<AttentionPrefillOp>(&op); a && !cache_ok(a->k_cache)) {
      return Support::no(kCacheReason);
    }
    if (const auto* a = std::get_if<AttentionDecodeOp>(&op); a && !cache_ok(a->k_cache)) {
      return Support::no(kCacheReason);
    }
    return Support::yes();
  }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<RefStream>(); }

 private:
  DeviceInfo info_;
};

class RefBackend final : public Backend {
 public:
  std::string_view name() const override { return "ref"; }
  int device_count() const override { return 1; }
  Result<std::unique_ptr<Device>> open_device(int index) override {
    if (index != 0) return not_found("ref has one device, 0");
    return std::unique_ptr<Device>(new RefDevice());
  }
};

}  // namespace

Result<std::unique_ptr<Backend>> create_backend() { return std::unique_ptr<Backend>(new RefBackend()); }

}  // namespace tessera::ops::ref
