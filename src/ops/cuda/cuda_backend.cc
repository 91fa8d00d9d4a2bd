#include "ops/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include <fmt/core.h>

#include "base/check.h"
#include "ops/copy_runs.h"
#include "ops/cuda/kernel_math.h"
#include "ops/cuda/kernels.h"
#include "ops/op_tensors.h"

namespace tessera::ops::cuda {
namespace {

std::string cuda_error(const char* what, int e) {
  return fmt::format("cuda: {} failed: {}", what, cudaGetErrorString(static_cast<cudaError_t>(e)));
}
Status check(const char* what, int e) { return e == 0 ? ok_status() : internal_error(cuda_error(what, e)); }

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* p, size_t size) : Buffer(size), p_(p) {}
  ~CudaBuffer() override { cudaFree(p_); }
  void* host_ptr() override { return nullptr; }
  void* device_ptr() const { return p_; }

 private:
  void* p_;
};

template <typename T = float>
T* ptr(const Tensor& t) {
  if (!t.valid()) return nullptr;
  return reinterpret_cast<T*>(static_cast<uint8_t*>(static_cast<CudaBuffer*>(t.buffer)->device_ptr()) + t.offset);
}

bool cache_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}
// kernel_math.h's kCache* code of a cache type cache_ok() accepts.
int cache_code(DType t) {
  switch (t) {
    case DType::kF16:
      return kCacheF16;
    case DType::kBF16:
      return kCacheBf16;
    case DType::kQ8_0:
      return kCacheQ8_0;
    case DType::kQ4_0:
      return kCacheQ4_0;
    default:
      return kCacheF32;
  }
}
// A view's byte alignment: f32 and i32 views are read as words, everything else byte by byte or as halves.
size_t view_align(DType t) { return t == DType::kF32 || t == DType::kI32 ? 4 : 2; }

Support capability(const Op& op) {
  if (Status s = validate(op); !s.ok()) return Support::no(s.message());
  // Matmul and expert weights and embedding tables of every stored type are widened in the kernels (dq in
  // kernels.cu); validate() refuses i32 expert weights.
  if (const auto* mm = std::get_if<MatMulOp>(&op); mm && mm->w.dtype == DType::kI32)
    return Support::no("cuda matmul does not take i32 weights");
  const Tensor* cache = nullptr;
  if (const auto* kv = std::get_if<KvWriteOp>(&op)) cache = &kv->k_cache;
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) cache = &a->k_cache;
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) cache = &a->k_cache;
  if (cache && !cache_ok(cache->dtype))
    return Support::no(
        fmt::format("cuda keeps the KV cache in f32, f16, bf16, q8_0 or q4_0, not {}", dtype_name(cache->dtype)));
  if (cache && (cache->dtype == DType::kQ8_0 || cache->dtype == DType::kQ4_0) && cache->rank == 4 &&
      cache->dim(3) % 32 != 0)
    return Support::no(fmt::format("cuda keeps a {} KV cache for head_dim a multiple of 32, not {}",
                                   dtype_name(cache->dtype), cache->dim(3)));
  bool aligned = true;
  for_each_tensor(op, [&aligned](const Tensor& t) {
    if (t.valid()) aligned = aligned && t.offset % view_align(t.dtype) == 0;
  });
  if (!aligned) return Support::no("cuda needs tensor views aligned to their element size");
  return Support::yes();
}

// The kernels take ops.h's enumerations as plain ints (kernel_math.h).
static_assert(kActSilu == static_cast<int>(Activation::kSilu) &&
              kActGeluTanh == static_cast<int>(Activation::kGeluTanh) &&
              kActSwigluOai == static_cast<int>(Activation::kSwigluOai) &&
              kActGeluErf == static_cast<int>(Activation::kGeluErf) &&
              kActSigmoid == static_cast<int>(Activation::kSigmoid) && kActTanh == static_cast<int>(Activation::kTanh));
static_assert(kGateSoftmax == static_cast<int>(MoeGating::kSoftmax) &&
              kGateSigmoid == static_cast<int>(MoeGating::kSigmoid) &&
              kGateSoftmaxWeight == static_cast<int>(MoeGating::kSoftmaxWeight));
static_assert(kPoolMean == static_cast<int>(PoolKind::kMean) && kPoolFirst == static_cast<int>(PoolKind::kFirst) &&
              kPoolLast == static_cast<int>(PoolKind::kLast));

// moe_experts keeps the gated hidden rows of at most this many floats at once (16 MiB), going through a long
// prefill's rows in chunks; a decode step (tens of rows) is one chunk.
constexpr int64_t kMoeHiddenFloats = int64_t{1} << 22;
int64_t moe_ff(const MoeExpertsOp& o) { return o.gate_up.valid() ? o.gate_up.dim(1) / 2 : o.gate.dim(1); }
int64_t moe_chunk_rows(const MoeExpertsOp& o) {
  const int64_t per_row = std::max<int64_t>(1, o.ids.dim(1) * moe_ff(o));
  return std::clamp<int64_t>(kMoeHiddenFloats / per_row, 1, std::max<int64_t>(1, o.x.dim(0)));
}

// The scratch floats an operator needs on its stream (attention's scores, moe_experts' hidden rows): what
// record() gives a captured graph and the eager path grows its own scratch to.
size_t scratch_floats(const Op& op) {
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op))
    return static_cast<size_t>(a->q.dim(0) * a->q.dim(1) * (a->start_pos + a->q.dim(0)));
  if (const auto* d = std::get_if<AttentionDecodeOp>(&op))
    return static_cast<size_t>(d->q.dim(0) * d->q.dim(1) * d->block_tables.dim(1) * d->k_cache.dim(1));
  if (const auto* m = std::get_if<MoeExpertsOp>(&op))
    return static_cast<size_t>(moe_chunk_rows(*m) * m->ids.dim(1) * moe_ff(*m));
  return 0;
}

// A decode step captured from its stream into a CUDA graph (cudaStreamBeginCapture .. EndCapture) and
// instantiated once: a replay is one cudaGraphLaunch, the kernels' arguments fixed at capture.
class CudaGraphRecording final : public Recording {
 public:
  CudaGraphRecording(int device, cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec, float* scratch)
      : device_(device), stream_(stream), graph_(graph), exec_(exec), scratch_(scratch) {}
  ~CudaGraphRecording() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);  // a launch may still be running on it
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    if (scratch_) cudaFree(scratch_);
  }
  Status replay() override {
    cudaSetDevice(device_);
    return check("cudaGraphLaunch", cudaGraphLaunch(exec_, stream_));
  }
  std::string_view kind() const override { return "cuda graph"; }

 private:
  int device_;
  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  float* scratch_;  // the captured operators' scratch (attention, moe_experts): the graph's own, never reallocated
};

class CudaStream final : public Stream {
 public:
  Result<std::unique_ptr<Recording>> record(std::span<const Op> ops) override {
    size_t floats = 1;
    for (const Op& op : ops) {
      if (Support s = capability(op); !s.supported) {
        TS_RETURN_IF_ERROR(validate(op));
        return unimplemented(s.reason);
      }
      floats = std::max(floats, scratch_floats(op));
    }
    cudaSetDevice(device_);
    float* scores = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&scores), floats * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();
      return resource_exhausted(fmt::format("cuda: cannot allocate {} floats of graph scratch", floats));
    }
    TS_RETURN_IF_ERROR(
        check("cudaStreamBeginCapture", cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal)));
    capture_scratch_ = scores;
    capture_floats_ = floats;
    Status st = ok_status();
    for (const Op& op : ops) {
      st = std::visit([this](const auto& o) { return enqueue(o); }, op);
      if (!st.ok()) break;
    }
    capture_scratch_ = nullptr;
    capture_floats_ = 0;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);  // always: the stream leaves capture mode
    cudaGraphExec_t exec = nullptr;
    if (st.ok()) st = check("cudaStreamEndCapture", end);
    if (st.ok()) st = check("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
    auto rec = std::make_unique<CudaGraphRecording>(device_, stream_, graph, exec, scores);  // frees on error
    TS_RETURN_IF_ERROR(st);
    return std::unique_ptr<Recording>(std::move(rec));
  }

  explicit CudaStream(int device) : device_(device) {
    cudaSetDevice(device_);
    TS_CHECK(cudaStreamCreate(&stream_) == cudaSuccess);
    TS_CHECK(cudaMalloc(reinterpret_cast<void**>(&err_), sizeof(int)) == cudaSuccess);
    TS_CHECK(cudaMemset(err_, 0, sizeof(int)) == cudaSuccess);
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    if (scratch_) cudaFree(scratch_);
    cudaFree(err_);
    cudaStreamDestroy(stream_);
  }

  Status run(const Op& op) override {
    Support s = capability(op);
    if (!s.supported) {
      TS_RETURN_IF_ERROR(validate(op));
      return unimplemented(s.reason);
    }
    cudaSetDevice(device_);
    return std::visit([this](const auto& o) { return enqueue(o); }, op);
  }
  Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    TS_RETURN_IF_ERROR(range(dst, offset, bytes, "write"));
    if (bytes == 0) return ok_status();
    auto* d = static_cast<uint8_t*>(static_cast<CudaBuffer&>(dst).device_ptr()) + offset;
    TS_RETURN_IF_ERROR(check("cudaMemcpyAsync", cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, stream_)));
    return check("cudaStreamSynchronize", cudaStreamSynchronize(stream_));  // the caller's memory may go away
  }
  Status read(Buffer& src, size_t offset, void* dst, size_t bytes) override {
    TS_RETURN_IF_ERROR(range(src, offset, bytes, "read"));
    if (bytes == 0) return ok_status();
    auto* s = static_cast<uint8_t*>(static_cast<CudaBuffer&>(src).device_ptr()) + offset;
    TS_RETURN_IF_ERROR(check("cudaMemcpyAsync", cudaMemcpyAsync(dst, s, bytes, cudaMemcpyDeviceToHost, stream_)));
    return synchronize();
  }
  // One cudaMemcpyAsync per run on this stream, then one synchronisation (the staging memory is the caller's
  // again when this returns). With pinned staging (CudaDevice::register_staging) each copy is one DMA.
  Status copy_runs(Buffer& buffer, HostStaging& staging, std::span<const CopyRun> runs, CopyDirection dir) override {
    TS_RETURN_IF_ERROR(check_runs(buffer, staging, runs));
    cudaSetDevice(device_);
    auto* dev = static_cast<uint8_t*>(static_cast<CudaBuffer&>(buffer).device_ptr());
    auto* host = reinterpret_cast<uint8_t*>(staging.bytes().data());
    for (const CopyRun& r : runs) {
      if (r.bytes == 0) continue;
      const cudaError_t e =
          dir == CopyDirection::kToHost
              ? cudaMemcpyAsync(host + r.host_offset, dev + r.device_offset, r.bytes, cudaMemcpyDeviceToHost, stream_)
              : cudaMemcpyAsync(dev + r.device_offset, host + r.host_offset, r.bytes, cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) {
        cudaStreamSynchronize(stream_);  // the runs already queued still name the caller's memory
        return check("cudaMemcpyAsync", e);
      }
    }
    return synchronize();
  }
  Status synchronize() override {
    TS_RETURN_IF_ERROR(check("cudaStreamSynchronize", cudaStreamSynchronize(stream_)));
    int flag = 0;
    TS_RETURN_IF_ERROR(check("cudaMemcpy", cudaMemcpy(&flag, err_, sizeof flag, cudaMemcpyDeviceToHost)));
    if (flag == 0) return ok_status();
    cudaMemset(err_, 0, sizeof(int));
    return out_of_range("cuda: a token id, expert id, KV slot or block number was outside its range");
  }

 private:
  static Status range(Buffer& b, size_t offset, size_t bytes, const char* what) {
    if (offset > b.size() || bytes > b.size() - offset) {
      return out_of_range(
          fmt::format("{} of {} bytes at offset {} runs past a {}-byte buffer", what, bytes, offset, b.size()));
    }
    return ok_status();
  }
  static int i32(int64_t v) { return static_cast<int>(v); }

  Status enqueue(const EmbeddingOp& o) {
    if (o.ids.dim(0) == 0) return ok_status();
    return check("embedding",
                 launch_embedding(ptr<uint8_t>(o.table), static_cast<int>(o.table.dtype),
                                  static_cast<int64_t>(o.table.row_bytes()), ptr<int32_t>(o.ids), ptr(o.out),
                                  i32(o.ids.dim(0)), i32(o.table.dim(1)), i32(o.table.dim(0)), o.scale, err_, stream_));
  }
  Status enqueue(const RmsNormOp& o) {
    if (o.x.dim(0) == 0) return ok_status();
    return check("rms_norm", launch_rms_norm(ptr(o.x), ptr(o.weight), ptr(o.out), i32(o.x.dim(0)), i32(o.x.dim(1)),
                                             o.eps, stream_));
  }
  Status enqueue(const AddRmsNormOp& o) {
    if (o.residual.dim(0) == 0) return ok_status();
    return check("add_rms_norm", launch_add_rms_norm(ptr(o.residual), ptr(o.delta), ptr(o.weight), ptr(o.out),
                                                     i32(o.residual.dim(0)), i32(o.residual.dim(1)), o.eps, stream_));
  }
  Status enqueue(const RopeOp& o) {
    if (o.q.dim(0) == 0) return ok_status();
    return check("rope", launch_rope(ptr(o.q), ptr(o.k), ptr<int32_t>(o.positions), i32(o.q.dim(0)), i32(o.q.dim(1)),
                                     i32(o.k.dim(1)), i32(o.q.dim(2)), i32(o.rotated(o.q.dim(2))), o.theta,
                                     o.layout == RopeLayout::kInterleaved, ptr(o.freqs), o.mscale, stream_));
  }
  Status enqueue(const KvWriteOp& o) {
    if (o.k.dim(0) == 0) return ok_status();
    return check("kv_write",
                 launch_kv_write(ptr(o.k), ptr(o.v), ptr<void>(o.k_cache), ptr<void>(o.v_cache),
                                 cache_code(o.k_cache.dtype), ptr<int32_t>(o.slots), i32(o.k.dim(0)),
                                 i32(o.k.row_elems()), i32(o.k_cache.dim(0) * o.k_cache.dim(1)), err_, stream_));
  }
  Result<float*> scratch(size_t floats) {
    if (capture_scratch_) {  // capturing: the graph's own scratch (a cudaFree now would break the graph)
      if (floats > capture_floats_) return internal_error("cuda: a captured operator outgrew its scratch");
      return capture_scratch_;
    }
    if (floats > scratch_floats_) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_floats_ = 0;
      if (cudaMalloc(reinterpret_cast<void**>(&scratch_), floats * sizeof(float)) != cudaSuccess) {
        return resource_exhausted(fmt::format("cuda: cannot allocate {} floats of scratch", floats));
      }
      scratch_floats_ = floats;
    }
    return scratch_;
  }
  Status attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& tables, int64_t stride,
                   const int32_t* lens, int32_t start_pos, const Tensor& out, int64_t max_ctx,
                   const AttentionScores& opt, const Tensor& sinks) {
    const int64_t count = q.dim(0), heads = q.dim(1);
    if (count == 0) return ok_status();
    TS_ASSIGN_OR_RETURN(float* s, scratch(static_cast<size_t>(std::max<int64_t>(1, count * heads * max_ctx))));
    return check("attention",
                 launch_attention(ptr(q), ptr<void>(kc), ptr<void>(vc), cache_code(kc.dtype), ptr<int32_t>(tables),
                                  i32(stride), lens, start_pos, ptr(out), s, i32(max_ctx), i32(count), i32(heads),
                                  i32(kc.dim(2)), i32(kc.dim(3)), i32(kc.dim(1)), i32(kc.dim(0)), opt.scale,
                                  opt.softcap, opt.window, ptr(sinks), err_, stream_));
  }
  Status enqueue(const AttentionPrefillOp& o) {
    return attention(o.q, o.k_cache, o.v_cache, o.block_table, o.block_table.dim(0), nullptr, o.start_pos, o.out,
                     o.start_pos + o.q.dim(0), o.scores, o.sinks);
  }
  Status enqueue(const AttentionDecodeOp& o) {
    const int64_t stride = o.block_tables.dim(1);
    return attention(o.q, o.k_cache, o.v_cache, o.block_tables, stride, ptr<int32_t>(o.context_lens), 0, o.out,
                     stride * o.k_cache.dim(1), o.scores, o.sinks);
  }
  Status enqueue(const MatMulOp& o) {
    if (o.x.dim(0) == 0 || o.w.dim(0) == 0) return ok_status();
    return check("matmul", launch_matmul(ptr(o.x), ptr<uint8_t>(o.w), static_cast<int>(o.w.dtype),
                                         static_cast<int64_t>(o.w.row_bytes()), ptr(o.bias), ptr(o.out),
                                         i32(o.x.dim(0)), i32(o.x.dim(1)), i32(o.w.dim(0)), stream_));
  }
  Status enqueue(const SiluMulOp& o) {
    if (o.up.numel() == 0) return ok_status();
    // A gate of one value per row (sigmoid only, validate()) covers its row of up.
    const int64_t per = o.gate.numel() == o.up.numel() ? 1 : o.up.row_elems();
    return check("silu_mul", launch_silu_mul(ptr(o.gate), ptr(o.up), ptr(o.out), o.up.numel(), static_cast<int>(o.act),
                                             per, stream_));
  }
  Status enqueue(const ScaleOp& o) {
    if (o.x.numel() == 0) return ok_status();
    return check("scale", launch_scale(ptr(o.x), ptr(o.out), o.x.numel(), o.scale, stream_));
  }
  Status enqueue(const AddOp& o) {
    if (o.a.numel() == 0) return ok_status();
    return check("add", launch_add(ptr(o.a), ptr(o.b), ptr(o.out), o.a.numel(), stream_));
  }
  Status enqueue(const SoftmaxOp& o) {
    if (o.x.dim(0) == 0) return ok_status();
    return check("softmax", launch_softmax(ptr(o.x), ptr(o.out), i32(o.x.dim(0)), i32(o.x.dim(1)), stream_));
  }
  Status enqueue(const LayerNormOp& o) {
    if (o.x.numel() == 0) return ok_status();
    return check("layer_norm", launch_layer_norm(ptr(o.x), ptr(o.weight), ptr(o.bias), ptr(o.out), i32(o.x.dim(0)),
                                                 i32(o.x.dim(1)), o.eps, stream_));
  }
  Status enqueue(const ActivationOp& o) {
    if (o.x.numel() == 0) return ok_status();
    return check("activation", launch_activation(ptr(o.x), ptr(o.out), o.x.numel(), static_cast<int>(o.act), stream_));
  }
  Status enqueue(const AttentionNonCausalOp& o) {
    if (o.q.numel() == 0) return ok_status();
    return check("attention_noncausal",
                 launch_attention_noncausal(ptr(o.q), ptr(o.k), ptr(o.v), ptr(o.out), i32(o.q.dim(0)), i32(o.q.dim(1)),
                                            i32(o.k.dim(1)), i32(o.q.dim(2)), o.scale, stream_));
  }
  Status enqueue(const PoolOp& o) {
    if (o.x.dim(1) == 0) return ok_status();
    return check(
        "pool", launch_pool(ptr(o.x), ptr(o.out), i32(o.x.dim(0)), i32(o.x.dim(1)), static_cast<int>(o.kind), stream_));
  }
  Status enqueue(const ArgmaxOp& o) {
    if (o.x.dim(0) == 0) return ok_status();
    return check("argmax", launch_argmax(ptr(o.x), ptr<int32_t>(o.out), i32(o.x.dim(0)), i32(o.x.dim(1)), stream_));
  }
  Status enqueue(const MoeRouteOp& o) {
    if (o.logits.dim(0) == 0) return ok_status();
    return check("moe_route",
                 launch_moe_route(ptr(o.logits), ptr(o.bias), ptr(o.expert_scale), ptr<int32_t>(o.ids), ptr(o.weights),
                                  i32(o.logits.dim(0)), i32(o.logits.dim(1)), i32(o.ids.dim(1)),
                                  static_cast<int>(o.gating), o.normalize, o.scale, stream_));
  }
  Status enqueue(const MoeExpertsOp& o) {
    if (o.x.numel() == 0) return ok_status();
    const bool fused = o.gate_up.valid();
    const Tensor& gw = fused ? o.gate_up : o.gate;
    const int64_t dim = o.x.dim(1), ff = moe_ff(o), chunk = moe_chunk_rows(o);
    TS_ASSIGN_OR_RETURN(float* h, scratch(static_cast<size_t>(std::max<int64_t>(1, chunk * o.ids.dim(1) * ff))));
    MoeExpertsArgs a{};
    a.x = ptr(o.x);
    a.ids = ptr<int32_t>(o.ids);
    a.weights = ptr(o.weights);
    a.gate_type = static_cast<int>(gw.dtype);
    a.row_bytes = static_cast<int64_t>(dtype_bytes(gw.dtype, static_cast<size_t>(dim)));
    a.expert_bytes = static_cast<int64_t>(gw.row_bytes());  // fused: gate's ff rows, then up's
    a.gate = ptr<uint8_t>(gw);
    a.up = fused ? a.gate + ff * a.row_bytes : ptr<uint8_t>(o.up);
    a.gate_bias = ptr(o.gate_bias);
    a.up_bias = ptr(o.up_bias);
    a.down = ptr<uint8_t>(o.down);
    a.down_type = static_cast<int>(o.down.dtype);
    a.down_row_bytes = static_cast<int64_t>(dtype_bytes(o.down.dtype, static_cast<size_t>(ff)));
    a.down_expert_bytes = static_cast<int64_t>(o.down.row_bytes());
    a.down_bias = ptr(o.down_bias);
    a.out = ptr(o.out);
    a.h = h;
    a.n = i32(o.x.dim(0));
    a.dim = i32(dim);
    a.k = i32(o.ids.dim(1));
    a.ff = i32(ff);
    a.experts = i32(gw.dim(0));
    a.act = static_cast<int>(o.act);
    a.alpha = o.alpha;
    a.limit = o.limit;
    a.chunk_rows = i32(chunk);
    a.err = err_;
    return check("moe_experts", launch_moe_experts(a, stream_));
  }
  Status enqueue(const SplitHeadsOp& o) {
    if (o.a.numel() == 0) return ok_status();
    return check("split_heads",
                 launch_split_heads(ptr(o.x), ptr(o.a), ptr(o.b), o.a.dim(0) * o.a.dim(1), i32(o.a.dim(2)), stream_));
  }
  // Run even for no tokens: `reset` still clears the carried window (and state), as ref.
  Status enqueue(const CausalConv1dOp& o) {
    if (o.x.dim(1) == 0) return ok_status();
    return check("causal_conv1d",
                 launch_causal_conv1d(ptr(o.x), ptr(o.weight), ptr(o.state), ptr(o.out), i32(o.x.dim(0)),
                                      i32(o.x.dim(1)), i32(o.weight.dim(1)), o.reset, stream_));
  }
  Status enqueue(const GatedDeltaRuleOp& o) {
    if (o.state.numel() == 0) return ok_status();
    return check("gated_delta_rule",
                 launch_gated_delta_rule(ptr(o.qkv), ptr(o.alpha), ptr(o.beta), ptr(o.dt_bias), ptr(o.a), ptr(o.state),
                                         ptr(o.out), i32(o.qkv.dim(0)), i32(o.state.dim(0)), o.k_heads,
                                         i32(o.state.dim(1)), o.eps, o.reset, stream_));
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  int* err_ = nullptr;
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  float* capture_scratch_ = nullptr;  // while record() captures
  size_t capture_floats_ = 0;
};

// Staging memory pinned for the device (cudaHostRegister) while it is registered, so copy_runs is DMA rather than
// the driver's bounce through its own pinned buffer.
class PinnedStaging final : public HostStaging {
 public:
  explicit PinnedStaging(std::span<std::byte> bytes) : HostStaging(bytes) {}
  ~PinnedStaging() override { cudaHostUnregister(bytes().data()); }
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, DeviceInfo info) : index_(index), info_(std::move(info)) {}
  const DeviceInfo& info() const override { return info_; }
  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    cudaSetDevice(index_);
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
      cudaGetLastError();
      return resource_exhausted(fmt::format("cuda: cannot allocate {} bytes of device memory", bytes));
    }
    cudaMemset(p, 0, std::max<size_t>(bytes, 256));
    return std::unique_ptr<Buffer>(new CudaBuffer(p, bytes));
  }
  Support supports(const Op& op) const override { return capability(op); }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(index_); }
  Result<std::unique_ptr<HostStaging>> register_staging(std::span<std::byte> bytes) override {
    if (bytes.empty()) return std::make_unique<HostStaging>(bytes);
    cudaSetDevice(index_);
    const cudaError_t e = cudaHostRegister(bytes.data(), bytes.size(), cudaHostRegisterDefault);
    if (e == cudaSuccess) return std::unique_ptr<HostStaging>(new PinnedStaging(bytes));
    // Already registered (the link pinned it), or the driver refuses: copies still work, staged by the driver.
    cudaGetLastError();
    return std::make_unique<HostStaging>(bytes);
  }

 private:
  int index_;
  DeviceInfo info_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int count) : count_(count) {}
  std::string_view name() const override { return "cuda"; }
  int device_count() const override { return count_; }
  Result<std::unique_ptr<Device>> open_device(int index) override {
    if (index < 0 || index >= count_) return not_found(fmt::format("cuda has no device {}", index));
    cudaDeviceProp prop{};
    TS_RETURN_IF_ERROR(check("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, index)));
    DeviceInfo info;
    info.backend = "cuda";
    info.name = fmt::format("{} (sm_{}{})", prop.name, prop.major, prop.minor);
    info.memory_bytes = prop.totalGlobalMem;
    info.host_visible = false;
    info.supports_graphs = true;  // CudaStream::record: CUDA Graphs by stream capture
    return std::unique_ptr<Device>(new CudaDevice(index, std::move(info)));
  }

 private:
  int count_;
};

}  // namespace

Result<std::unique_ptr<Backend>> create_backend() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return unavailable(fmt::format("cuda: no CUDA device here ({})",
                                   e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices"));
  }
  return std::unique_ptr<Backend>(new CudaBackend(count));
}

}  // namespace tessera::ops::cuda
