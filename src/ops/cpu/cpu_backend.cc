#include "ops/cpu/cpu_backend.h"

#include "ops/host_memory.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/core.h>

#include "ops/cpu/ceilings.h"
#include "ops/cpu/kernels.h"

namespace tessera::ops::cpu {
namespace {

constexpr int kMaxThreads = 1024;

bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

bool weight_supported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}
bool cache_supported(DType t) { return t == DType::kF32 || t == DType::kF16; }

Support capability(const Op& op) {
  if (Status s = validate(op); !s.ok()) return Support::no(s.message());
  if (const auto* mm = std::get_if<MatMulOp>(&op); mm && !weight_supported(mm->w.dtype)) {
    return Support::no(fmt::format("cpu matmul does not take {} weights", dtype_name(mm->w.dtype)));
  }
  const Tensor* cache = nullptr;
  if (const auto* kv = std::get_if<KvWriteOp>(&op)) cache = &kv->k_cache;
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) cache = &a->k_cache;
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) cache = &a->k_cache;
  if (cache && !cache_supported(cache->dtype)) return Support::no("cpu keeps the KV cache in f32 or f16");
  return Support::yes();
}

template <bool kAvx2>
Status dispatch(const Op& op, const Ctx& ctx) {
  return std::visit(
      [&ctx](const auto& o) -> Status {
        using T = std::decay_t<decltype(o)>;
#define TS_CPU_CALL(fn) return kAvx2 ? avx2::fn(o, ctx) : generic::fn(o, ctx)
        if constexpr (std::is_same_v<T, EmbeddingOp>) {
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
          if (o.w.dtype == DType::kQ8_0 || o.w.dtype == DType::kQ4_0) TS_CPU_CALL(matmul_quant);
          TS_CPU_CALL(matmul_dense);
        } else if constexpr (std::is_same_v<T, SiluMulOp>) {
          TS_CPU_CALL(silu_mul);
        } else if constexpr (std::is_same_v<T, AddOp>) {
          TS_CPU_CALL(add);
        } else if constexpr (std::is_same_v<T, SoftmaxOp>) {
          TS_CPU_CALL(softmax);
        } else {
          TS_CPU_CALL(argmax);
        }
#undef TS_CPU_CALL
      },
      op);
}

class CpuStream final : public Stream {
 public:
  CpuStream(bool avx2, int threads) : avx2_(avx2), ctx_{threads} {}

  Status run(const Op& op) override {
    Support s = capability(op);
    if (!s.supported) {
      if (Status v = validate(op); !v.ok()) return v;
      return unimplemented(s.reason);
    }
    return avx2_ ? dispatch<true>(op, ctx_) : dispatch<false>(op, ctx_);
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

 private:
  bool avx2_;
  Ctx ctx_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice(bool avx2, int threads) : avx2_(avx2), threads_(threads) {
    info_.backend = "cpu";
    info_.name =
        fmt::format("host CPU ({}, {} thread{})", avx2 ? "avx2+fma+f16c" : "generic", threads, threads == 1 ? "" : "s");
    info_.host_visible = true;
    info_.supports_graphs = false;
  }
  const DeviceInfo& info() const override { return info_; }

  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override { return alloc_host_buffer(bytes, "cpu"); }
  Support supports(const Op& op) const override { return capability(op); }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(avx2_, threads_); }

 private:
  bool avx2_;
  int threads_;
  DeviceInfo info_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Isa isa) : avx2_(isa == Isa::kAuto && has_avx2()) {}
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
    return std::unique_ptr<Device>(new CpuDevice(avx2_, threads));
  }

 private:
  bool avx2_;
};

}  // namespace

Result<std::unique_ptr<Backend>> create_backend(Isa isa) { return std::unique_ptr<Backend>(new CpuBackend(isa)); }

namespace avx2 {
Ceilings measure(int threads, size_t bytes);
}
namespace generic {
Ceilings measure(int threads, size_t bytes);
}

Ceilings measure_ceilings(int threads, size_t bytes) {
  threads = std::max(1, threads);
  return has_avx2() ? avx2::measure(threads, bytes) : generic::measure(threads, bytes);
}

const char* detected_isa() { return has_avx2() ? "avx2+fma+f16c" : "generic"; }

std::string runtime_versions() {
  std::string blas = openblas_get_config();
  while (!blas.empty() && blas.back() == ' ') blas.pop_back();
  return fmt::format("{}; OpenMP {}; GCC {}", blas, _OPENMP, __VERSION__);
}

}  // namespace tessera::ops::cpu
