#include "ops/cpu/cpu_backend.h"

#include "ops/host_memory.h"

#include <cpuid.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/core.h>

#include "base/quant.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/ceilings.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/repack.h"

namespace tessera::ops::cpu {
namespace {

constexpr int kMaxThreads = 1024;

bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
bool has_avx512() {
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}
// The amx build is the avx512 one plus tiles; amx_status() also asks Linux for the tile permission (once).
bool has_amx() { return has_avx512() && amx_status().usable; }
// The amx_emulated build is the amx one's flags without the tiles: AVX-512 and AVX512-BF16 (the activations'
// conversions to bf16).
bool has_amx_emulated() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }

const char* isa_features(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
      return "avx512f/bw/vl/dq+vnni+amx-int8";
    case Isa::kAmxEmulated:
      return "avx512f/bw/vl/dq+vnni+bf16, amx tiles in software";
    case Isa::kAvx512:
      return "avx512f/bw/vl/dq+vnni";
    case Isa::kAvx2:
      return "avx2+fma+f16c";
    default:
      return "scalar";
  }
}

// TESSERA_CPU_ISA resolved to a concrete variant (never kAuto).
Result<Isa> resolve(Isa isa) {
  if (isa == Isa::kAuto) {
    const char* env = std::getenv("TESSERA_CPU_ISA");
    if (env != nullptr && *env != '\0') {
      auto parsed = parse_isa(env);
      if (!parsed.ok()) return parsed.status().with_context("TESSERA_CPU_ISA");
      isa = *parsed;
    }
  }
  if (isa == Isa::kAuto) {
    return has_amx() ? Isa::kAmx : has_avx512() ? Isa::kAvx512 : has_avx2() ? Isa::kAvx2 : Isa::kGeneric;
  }
  if (isa == Isa::kAmx && has_avx512() && !has_amx()) {
    return failed_precondition(fmt::format("cpu: the amx kernels cannot run here: {}", amx_status().reason));
  }
  if (!isa_supported(isa)) {
    return failed_precondition(fmt::format("cpu: the {} kernels need {}, which this processor does not report",
                                           isa_name(isa), isa_features(isa)));
  }
  return isa;
}

// Every storage type has a cpu matmul kernel.
bool weight_supported(DType t) { return t != DType::kI32; }
bool is_kquant(DType t) { return dtype_info(t).block_elems == kSuperBlock; }
bool cache_supported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}

Support capability(const Op& op) {
  if (Status s = validate(op); !s.ok()) return Support::no(s.message());
  if (Status s = check_unpacked_operands(op); !s.ok()) return Support::no(s.message());
  if (const auto* mm = std::get_if<MatMulOp>(&op); mm && !weight_supported(mm->w.dtype)) {
    return Support::no(fmt::format("cpu matmul does not take {} weights", dtype_name(mm->w.dtype)));
  }
  if (const auto* me = std::get_if<MoeExpertsOp>(&op);
      me &&
      (!weight_supported((me->gate_up.valid() ? me->gate_up : me->gate).dtype) || !weight_supported(me->down.dtype))) {
    return Support::no("cpu moe_experts does not take these expert weight types");
  }
  const Tensor* cache = nullptr;
  if (const auto* kv = std::get_if<KvWriteOp>(&op)) cache = &kv->k_cache;
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) cache = &a->k_cache;
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) cache = &a->k_cache;
  if (cache && !cache_supported(cache->dtype))
    return Support::no(
        fmt::format("cpu keeps the KV cache in f32, f16, bf16, q8_0 or q4_0, not {}", dtype_name(cache->dtype)));
  return Support::yes();
}

template <Isa kIsa>
Status dispatch(const Op& op, const Ctx& ctx) {
  return std::visit(
      [&ctx](const auto& o) -> Status {
        using T = std::decay_t<decltype(o)>;
// The amx builds have their own matmuls only (TS_CPU_CALL_MM); every other operator is the avx512 kernel.
#define TS_CPU_CALL(fn)                                                              \
  if constexpr (kIsa == Isa::kAvx512 || uses_tiles(kIsa)) return avx512::fn(o, ctx); \
  if constexpr (kIsa == Isa::kAvx2) return avx2::fn(o, ctx);                         \
  return generic::fn(o, ctx)
#define TS_CPU_CALL_MM(fn)                                                  \
  if constexpr (kIsa == Isa::kAmx) return amx::fn(o, ctx);                  \
  if constexpr (kIsa == Isa::kAmxEmulated) return amx_emulated::fn(o, ctx); \
  TS_CPU_CALL(fn)
        if constexpr (std::is_same_v<T, EmbeddingOp>) {
          if (panel_layout(o.table) != nullptr) return embedding_from_panels(o);  // a table shared with a matmul
          TS_CPU_CALL(embedding);
        } else if constexpr (std::is_same_v<T, RmsNormOp>) {
          TS_CPU_CALL(rms_norm);
        } else if constexpr (std::is_same_v<T, AddRmsNormOp>) {
          TS_CPU_CALL(add_rms_norm);
        } else if constexpr (std::is_same_v<T, RopeOp>) {
          TS_CPU_CALL(rope);
        } else if constexpr (std::is_same_v<T, KvWriteOp>) {
          TS_CPU_CALL(kv_write);
        } else if constexpr (std::is_same_v<T, AttentionPrefillOp>) {
          TS_CPU_CALL(attention_prefill);
        } else if constexpr (std::is_same_v<T, AttentionDecodeOp>) {
          TS_CPU_CALL(attention_decode);
        } else if constexpr (std::is_same_v<T, MatMulOp>) {
          if (dtype_info(o.w.dtype).block_elems == kQuantBlock) {
            TS_CPU_CALL_MM(matmul_quant);
          } else if (is_kquant(o.w.dtype)) {
            TS_CPU_CALL_MM(matmul_kquant);
          } else {
            TS_CPU_CALL_MM(matmul_dense);
          }
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          TS_CPU_CALL(silu_mul);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          TS_CPU_CALL(add);
        } else if constexpr (std::is_same_v<T, ScaleOp>) {
          TS_CPU_CALL(scale);
        } else if constexpr (std::is_same_v<T, SoftmaxOp>) {
          TS_CPU_CALL(softmax);
        } else if constexpr (std::is_same_v<T, LayerNormOp>) {
          TS_CPU_CALL(layer_norm);
        } else if constexpr (std::is_same_v<T, ActivationOp>) {
          TS_CPU_CALL(activation);
        } else if constexpr (std::is_same_v<T, AttentionNonCausalOp>) {
          TS_CPU_CALL(attention_noncausal);
        } else if constexpr (std::is_same_v<T, PoolOp>) {
          TS_CPU_CALL(pool);
        } else if constexpr (std::is_same_v<T, ArgmaxOp>) {
          TS_CPU_CALL(argmax);
        } else if constexpr (std::is_same_v<T, MoeRouteOp>) {
          TS_CPU_CALL(moe_route);
        } else if constexpr (std::is_same_v<T, SplitHeadsOp>) {
          TS_CPU_CALL(split_heads);
        } else if constexpr (std::is_same_v<T, CausalConv1dOp>) {
          TS_CPU_CALL(causal_conv1d);
        } else if constexpr (std::is_same_v<T, GatedDeltaRuleOp>) {
          TS_CPU_CALL(gated_delta_rule);
        } else {
          static_assert(std::is_same_v<T, MoeExpertsOp>);
          TS_CPU_CALL_MM(moe_experts);  // the experts' matmuls are its build's (amx: its tiles)
        }
#undef TS_CPU_CALL_MM
#undef TS_CPU_CALL
      },
      op);
}

using Kernel = Status (*)(const Op&, const Ctx&);
Kernel kernel_for(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
      return &dispatch<Isa::kAmx>;
    case Isa::kAmxEmulated:
      return &dispatch<Isa::kAmxEmulated>;
    case Isa::kAvx512:
      return &dispatch<Isa::kAvx512>;
    case Isa::kAvx2:
      return &dispatch<Isa::kAvx2>;
    default:
      return &dispatch<Isa::kGeneric>;
  }
}

// A decode step as the cpu records it: each operator checked once and bound to its kernel variant, so a
// replay is a straight walk that skips validation, capability checks and the ISA switch.
class CpuRecording final : public Recording {
 public:
  explicit CpuRecording(Ctx ctx) : ctx_(ctx) {}
  void add(Kernel k, const Op& op) { steps_.emplace_back(k, op); }
  Status replay() override {
    for (const auto& [kernel, op] : steps_) TS_RETURN_IF_ERROR(kernel(op, ctx_));
    return ok_status();
  }
  std::string_view kind() const override { return "cpu op list"; }

 private:
  Ctx ctx_;
  std::vector<std::pair<Kernel, Op>> steps_;
};

class CpuStream final : public Stream {
 public:
  // The stream's threads live as long as it: one pool per stream, started here, not per operator.
  CpuStream(Isa isa, int threads) : isa_(isa), pool_(threads), ctx_{threads, &pool_} {}

  Result<std::unique_ptr<Recording>> record(std::span<const Op> ops) override {
    auto rec = std::make_unique<CpuRecording>(ctx_);
    const Kernel kernel = kernel_for(isa_);
    for (const Op& op : ops) {
      if (Support s = capability(op); !s.supported) {
        if (Status v = validate(op); !v.ok()) return v;
        TS_RETURN_IF_ERROR(check_unpacked_operands(op));
        return unimplemented(s.reason);
      }
      rec->add(kernel, op);
    }
    return std::unique_ptr<Recording>(std::move(rec));
  }

  Status run(const Op& op) override {
    Support s = capability(op);
    if (!s.supported) {
      if (Status v = validate(op); !v.ok()) return v;
      TS_RETURN_IF_ERROR(check_unpacked_operands(op));
      return unimplemented(s.reason);
    }
    switch (isa_) {
      case Isa::kAmx:
        return dispatch<Isa::kAmx>(op, ctx_);
      case Isa::kAmxEmulated:
        return dispatch<Isa::kAmxEmulated>(op, ctx_);
      case Isa::kAvx512:
        return dispatch<Isa::kAvx512>(op, ctx_);
      case Isa::kAvx2:
        return dispatch<Isa::kAvx2>(op, ctx_);
      default:
        return dispatch<Isa::kGeneric>(op, ctx_);
    }
  }
  void for_each_on_host(int64_t n, HostItemFn fn, void* ctx) override {
    if (n == 1) return fn(ctx, 0);  // nothing to share: no hand-off
    pool_.run(n, fn, ctx);          // one item a chunk: items (a sequence's draw) differ in cost, so claim them singly
  }
  Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_host_range(dst, offset, bytes, "write"));
    TS_RETURN_IF_ERROR(check_not_repacked(dst, "write"));
    auto* to = static_cast<uint8_t*>(dst.host_ptr()) + offset;
    if (bytes < kParallelHostBytes) {
      std::memcpy(to, src, bytes);
      return ok_status();
    }
    // A weight's upload from the mapped file: the copy (and the page faults on its source) over the stream's threads.
    constexpr size_t kPiece = size_t{2} << 20;
    parallel_for(&pool_, static_cast<int64_t>((bytes + kPiece - 1) / kPiece), [&](int64_t i) {
      const size_t at = static_cast<size_t>(i) * kPiece;
      std::memcpy(to + at, static_cast<const uint8_t*>(src) + at, std::min(kPiece, bytes - at));
    });
    return ok_status();
  }
  Status read(Buffer& src, size_t offset, void* dst, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_host_range(src, offset, bytes, "read"));
    TS_RETURN_IF_ERROR(check_not_repacked(src, "read"));
    std::memcpy(dst, static_cast<uint8_t*>(src.host_ptr()) + offset, bytes);
    return ok_status();
  }
  Status synchronize() override { return ok_status(); }

 private:
  Isa isa_;
  WorkerPool pool_;
  Ctx ctx_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice(Isa isa, int threads) : isa_(isa), threads_(threads) {
    info_.backend = "cpu";
    info_.name = fmt::format("host CPU ({} kernels: {}, {} thread{})", isa_name(isa), isa_features(isa), threads,
                             threads == 1 ? "" : "s");
    info_.host_visible = true;
    info_.supports_graphs = true;  // CpuStream::record
    info_.batch_invariant = true;  // every build's kernels (DecodeInvariance.*, CpuMatMul.EachRow...)
  }
  const DeviceInfo& info() const override { return info_; }

  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    if (threads_ <= 1 || bytes < kParallelHostBytes) return CpuBuffer::create(bytes);
    WorkerPool pool(threads_);  // a load's large buffers: zeroed over the device's threads (CpuBuffer::create)
    return CpuBuffer::create(bytes, &pool);
  }
  Support supports(const Op& op) const override { return capability(op); }
  // The amx, avx512 and avx2 kernels read q4_0 / q5_0 / q4_k / q6_k matrices in panels of their vector's rows
  // (amx: the avx512 panels, which its tiles read too, and bf16 panels); the generic build keeps every matrix
  // row-major.
  // amx: an f16 matrix marked decode-bound (a classifier) stays row-major on the f32 kernels; its other f16
  // matrices go on the bf16 tiles (matmul_dense.cc). avx512 / avx2: bf16 and f16 matrices go into panels of 16 / 8 rows
  // (matmul_dense_panels.h) except decode-bound ones, which prefill multiplies by its last row only and which keep
  // the row-major decode kernels.
  Status prepare_matmul_weight(const Tensor& w, const WeightHints& hints) override {
    const int p = isa_ == Isa::kAvx512 || uses_tiles(isa_) ? 16 : isa_ == Isa::kAvx2 ? 8 : 0;
    const bool amx = uses_tiles(isa_);
    auto* cb = dynamic_cast<CpuBuffer*>(w.buffer);
    if (cb != nullptr && amx && hints.decode_bound && w.dtype == DType::kF16) {
      if (cb->panels() == nullptr) cb->set_decode_bound();
      return ok_status();
    }
    if (!amx && hints.decode_bound && (w.dtype == DType::kF16 || w.dtype == DType::kBF16)) return ok_status();
    if (p == 0 || !repackable(w.dtype, p, amx) || (w.rank != 2 && w.rank != 3) || w.offset != 0 ||
        w.buffer == nullptr || w.bytes() != w.buffer->size() || cb == nullptr) {
      return ok_status();
    }
    if (threads_ <= 1 || w.bytes() < kParallelHostBytes) return repack_matrix(w, p, amx);
    WorkerPool pool(threads_);
    return repack_matrix(w, p, amx, &pool);
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(isa_, threads_); }

 private:
  Isa isa_;
  int threads_;
  DeviceInfo info_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Isa isa) : isa_(isa) {}
  std::string_view name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  Result<std::unique_ptr<Device>> open_device(int index) override { return open_device_with(index, {}); }
  Result<std::unique_ptr<Device>> open_device_with(int index, const DeviceOptions& options) override {
    if (index != 0) return not_found("cpu has one device, 0");
    if (options.threads < 0 || options.threads > kMaxThreads) {
      return invalid_argument(
          fmt::format("cpu: threads must be in [0, {}] (0: every processor), not {}", kMaxThreads, options.threads));
    }
    const int threads = options.threads > 0 ? options.threads : std::max(1, omp_get_num_procs());
    return std::unique_ptr<Device>(new CpuDevice(isa_, threads));
  }

 private:
  Isa isa_;  // resolved: never kAuto
};

}  // namespace

bool prefetch_far_to_l2() {
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}

bool prefetch_panels_far_to_l2() {
  static const bool far = [] {
    if (!prefetch_far_to_l2()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return true;
    // The displayed family: the base family, plus the extended family where the base is 0Fh (all of AMD's since K8).
    const unsigned base = (eax >> 8) & 0xf;
    const unsigned family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
    return family < 0x1a;
  }();
  return far;
}

namespace {
std::atomic<int> pinned_walk{-1};  // -1: the processor's
}  // namespace

PanelWalk kquant_decode_walk() {
  if (const int pinned = pinned_walk.load(std::memory_order_relaxed); pinned >= 0)
    return static_cast<PanelWalk>(pinned);
  // Zen 5 and later: AMD without the far L2 prefetch of the families before 1Ah.
  static const PanelWalk walk =
      prefetch_far_to_l2() && !prefetch_panels_far_to_l2() ? PanelWalk::kOne : PanelWalk::kPairs;
  return walk;
}

void pin_kquant_decode_walk(std::optional<PanelWalk> walk) {
  pinned_walk.store(walk ? static_cast<int>(*walk) : -1, std::memory_order_relaxed);
}

Result<Isa> parse_isa(std::string_view name) {
  for (Isa i : {Isa::kAuto, Isa::kAmx, Isa::kAvx512, Isa::kAvx2, Isa::kGeneric, Isa::kAmxEmulated}) {
    if (isa_name(i) == name) return i;
  }
  return invalid_argument(
      fmt::format("unknown cpu kernel variant '{}' (auto, amx, avx512, avx2, generic or amx-emulated)", name));
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAuto:
      return "auto";
    case Isa::kAmx:
      return "amx";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kGeneric:
      return "generic";
    case Isa::kAmxEmulated:
      return "amx-emulated";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
      return has_amx();
    case Isa::kAmxEmulated:
      return has_amx_emulated();
    case Isa::kAvx512:
      return has_avx512();
    case Isa::kAvx2:
      return has_avx2();
    default:
      return true;
  }
}

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAmx, Isa::kAvx512, Isa::kAvx2, Isa::kGeneric}) {
    if (isa_supported(i)) out.push_back(i);
  }
  return out;
}

Result<std::unique_ptr<Backend>> create_backend(Isa isa) {
  TS_ASSIGN_OR_RETURN(Isa resolved, resolve(isa));
  return std::unique_ptr<Backend>(new CpuBackend(resolved));
}

namespace amx {
Ceilings measure(int threads, size_t bytes);
}
namespace amx_emulated {
Ceilings measure(int threads, size_t bytes);
}
namespace avx512 {
Ceilings measure(int threads, size_t bytes);
}
namespace avx2 {
Ceilings measure(int threads, size_t bytes);
}
namespace generic {
Ceilings measure(int threads, size_t bytes);
}

Ceilings measure_ceilings(int threads, size_t bytes) {
  threads = std::max(1, threads);
  // The variant the cpu backend runs here (TESSERA_CPU_ISA included): its vector width is the ceiling's.
  const Result<Isa> isa = resolve(Isa::kAuto);
  switch (isa.ok() ? *isa : Isa::kGeneric) {
    case Isa::kAmx:
      return amx::measure(threads, bytes);
    case Isa::kAmxEmulated:  // no tile peak to measure: the others
      return amx_emulated::measure(threads, bytes);
    case Isa::kAvx512:
      return avx512::measure(threads, bytes);
    case Isa::kAvx2:
      return avx2::measure(threads, bytes);
    default:
      return generic::measure(threads, bytes);
  }
}

ComputeCeiling matmul_ceiling(const Ceilings& c, DType matrices, std::string_view variant) {
  if (dtype_info(matrices).block_elems > 1) {
    if (variant.substr(0, 3) == "amx" && c.amx_int8_ops_per_s > 0) return {c.amx_int8_ops_per_s, "AMX int8"};
    if (variant.substr(0, 7) != "generic" && c.int8_dot_ops_per_s > 0) return {c.int8_dot_ops_per_s, "int8 dot"};
  }
  return {c.fma_flops_per_s, "f32 FMA"};
}

std::string detected_isa() {
  auto isa = resolve(Isa::kAuto);
  if (!isa.ok()) return isa.status().message();
  if (*isa == Isa::kGeneric) return "generic";
  return fmt::format("{} ({})", isa_name(*isa), isa_features(*isa));
}

std::string runtime_versions() { return fmt::format("OpenMP {}; GCC {}", _OPENMP, __VERSION__); }

}  // namespace tessera::ops::cpu
