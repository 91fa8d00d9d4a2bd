#include "ops/opencl/opencl_backend.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

#include <fmt/core.h>

#include "base/check.h"
#include "ops/copy_runs.h"
#include "ops/opencl/command_buffer.h"

namespace tessera::ops::opencl {

extern const char* const kKernelSource;  // kernels.cl, embedded at build time

namespace {

// Correctly rounded division and sqrt, as the reference's C++ has; everything else at default precision.
constexpr const char* kBuildOptions = "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt";
constexpr int kErrIndex = 1;

std::string cl_error(const char* what, cl_int e) { return fmt::format("opencl: {} failed (CL error {})", what, e); }

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  clGetDeviceInfo(d, what, 0, nullptr, &n);
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tessera/opencl";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tessera/opencl";
  return "/tmp/tessera-opencl-cache";
}

class ClBuffer final : public Buffer {
 public:
  ClBuffer(cl_mem m, size_t size) : Buffer(size), mem_(m) {}
  ~ClBuffer() override { clReleaseMemObject(mem_); }
  void* host_ptr() override { return nullptr; }
  cl_mem mem() const { return mem_; }

 private:
  cl_mem mem_;
};

bool is_block_type(DType t) { return dtype_info(t).block_elems > 1; }
// The unit a kernel indexes a tensor in: bytes for block-quantised weights, else one element.
size_t index_unit(DType t) { return is_block_type(t) ? 1 : t == DType::kF16 || t == DType::kBF16 ? 2 : 4; }

cl_mem mem_of(const Tensor& t) { return static_cast<ClBuffer*>(t.buffer)->mem(); }
cl_ulong elem_off(const Tensor& t) { return static_cast<cl_ulong>(t.offset / index_unit(t.dtype)); }

bool cache_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}
bool weight_ok(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K ||
         t == DType::kQ6_K;
}

// The matmul kernel of a weight type (weight_ok types only).
const char* matmul_kernel(DType w) {
  switch (w) {
    case DType::kF16:
      return "matmul_f16";
    case DType::kQ8_0:
      return "matmul_q8_0";
    case DType::kQ4_0:
      return "matmul_q4_0";
    case DType::kQ4_K:
      return "matmul_q4_k";
    case DType::kQ6_K:
      return "matmul_q6_k";
    default:
      return "matmul_f32";
  }
}

Support capability(const Op& op) {
  if (Status s = validate(op); !s.ok()) return Support::no(s.message());
  if (const auto* mm = std::get_if<MatMulOp>(&op); mm && !weight_ok(mm->w.dtype)) {
    return Support::no(
        fmt::format("opencl matmul takes f32, f16, q8_0, q4_0, q4_k or q6_k weights, not {}", dtype_name(mm->w.dtype)));
  }
  // Block kernels read the f16 scales with vload_half: the view must start on an even byte.
  if (const auto* mm = std::get_if<MatMulOp>(&op); mm && is_block_type(mm->w.dtype) && mm->w.offset % 2 != 0) {
    return Support::no("opencl needs quantised weight views at an even byte offset");
  }
  if (const auto* e = std::get_if<EmbeddingOp>(&op); e && e->table.dtype != DType::kF32)
    return Support::no("opencl embedding takes an f32 table");
  if (const auto* me = std::get_if<MoeExpertsOp>(&op)) {
    const Tensor& gw = me->gate_up.valid() ? me->gate_up : me->gate;
    if (!weight_ok(gw.dtype) || !weight_ok(me->down.dtype))
      return Support::no(fmt::format("opencl moe_experts takes f32, f16, q8_0, q4_0, q4_k or q6_k experts, not {} / {}",
                                     dtype_name(gw.dtype), dtype_name(me->down.dtype)));
    // The kernels read weights as bytes: f32 rows at multiples of 4, the rest (f16, blocks' f16 scales) of 2.
    for (const Tensor* t : {&gw, &me->up, &me->down}) {
      if (t->valid() && t->offset % (t->dtype == DType::kF32 ? 4 : 2) != 0)
        return Support::no("opencl needs expert weight views at aligned byte offsets");
    }
  }
  const Tensor* cache = nullptr;
  if (const auto* kv = std::get_if<KvWriteOp>(&op)) cache = &kv->k_cache;
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) cache = &a->k_cache;
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) cache = &a->k_cache;
  if (cache && !cache_ok(cache->dtype))
    return Support::no(
        fmt::format("opencl keeps the KV cache in f32, f16, bf16, q8_0 or q4_0, not {}", dtype_name(cache->dtype)));
  // A block cache's rows are whole blocks (the kernels quantise and widen one block of 32 at a time).
  if (cache && is_block_type(cache->dtype) && cache->rank == 4 && cache->dim(3) % 32 != 0)
    return Support::no(fmt::format("opencl keeps a {} KV cache for head_dim a multiple of 32, not {}",
                                   dtype_name(cache->dtype), cache->dim(3)));
  // Views must start on an element boundary of their type (kernels index by element).
  bool aligned = true;
  std::visit(
      [&aligned](const auto& o) {
        auto check = [&aligned](const Tensor& t) {
          if (t.valid()) aligned = aligned && t.offset % index_unit(t.dtype) == 0;
        };
        if constexpr (requires { o.x; }) check(o.x);
        if constexpr (requires { o.w; }) check(o.w);
        if constexpr (requires { o.out; }) check(o.out);
      },
      op);
  // The linear-attention operators' other f32 tensors (kernels index them by element too).
  auto f32_aligned = [&aligned](std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts) aligned = aligned && (!t->valid() || t->offset % 4 == 0);
  };
  if (const auto* c = std::get_if<CausalConv1dOp>(&op)) f32_aligned({&c->weight, &c->state});
  if (const auto* g = std::get_if<GatedDeltaRuleOp>(&op))
    f32_aligned({&g->qkv, &g->alpha, &g->beta, &g->dt_bias, &g->a, &g->state});
  if (const auto* sh = std::get_if<SplitHeadsOp>(&op)) f32_aligned({&sh->a, &sh->b});
  if (const auto* m = std::get_if<SiluMulOp>(&op)) f32_aligned({&m->gate, &m->up});
  if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) f32_aligned({&a->sinks});
  if (const auto* a = std::get_if<AttentionDecodeOp>(&op)) f32_aligned({&a->sinks});
  if (const auto* r = std::get_if<MoeRouteOp>(&op)) f32_aligned({&r->expert_scale, &r->bias});
  if (const auto* l = std::get_if<LayerNormOp>(&op)) f32_aligned({&l->weight, &l->bias});
  if (const auto* a = std::get_if<AttentionNonCausalOp>(&op)) f32_aligned({&a->q, &a->k, &a->v});
  if (!aligned) return Support::no("opencl needs tensor views aligned to their element size");
  return Support::yes();
}

// Shared by a device and its streams.
struct Shared {
  cl_context context = nullptr;
  cl_device_id device = nullptr;
  cl_program program = nullptr;
  bool sub_device = false;
  CommandBufferApi command_buffer;  // cl_khr_command_buffer where the device has it
  ~Shared() {
    if (program) clReleaseProgram(program);
    if (context) clReleaseContext(context);
    if (sub_device) clReleaseDevice(device);
  }
};

class ClStream final : public Stream {
 public:
  static tessera::Result<std::unique_ptr<ClStream>> create(std::shared_ptr<Shared> shared) {
    std::unique_ptr<ClStream> s(new ClStream(std::move(shared)));
    cl_int e = CL_SUCCESS;
    s->queue_ = clCreateCommandQueue(s->shared_->context, s->shared_->device, 0, &e);
    if (e != CL_SUCCESS) return internal_error(cl_error("clCreateCommandQueue", e));
    cl_uint n = 0;
    clCreateKernelsInProgram(s->shared_->program, 0, nullptr, &n);
    std::vector<cl_kernel> ks(n);
    e = clCreateKernelsInProgram(s->shared_->program, n, ks.data(), nullptr);
    if (e != CL_SUCCESS) return internal_error(cl_error("clCreateKernelsInProgram", e));
    for (cl_kernel k : ks) {
      char name[64] = {};
      clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, nullptr);
      s->kernels_.emplace_back(name, k);
    }
    s->err_ = clCreateBuffer(s->shared_->context, CL_MEM_READ_WRITE, sizeof(cl_int), nullptr, &e);
    if (e != CL_SUCCESS) return internal_error(cl_error("clCreateBuffer", e));
    const cl_int zero = 0;
    e = clEnqueueWriteBuffer(s->queue_, s->err_, CL_TRUE, 0, sizeof zero, &zero, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return internal_error(cl_error("clEnqueueWriteBuffer", e));
    return s;
  }
  ~ClStream() override {
    if (queue_) clFinish(queue_);
    for (auto& [name, k] : kernels_) clReleaseKernel(k);
    if (scratch_) clReleaseMemObject(scratch_);
    if (err_) clReleaseMemObject(err_);
    if (queue_) clReleaseCommandQueue(queue_);
  }

  Status run(const Op& op) override {
    Support s = capability(op);
    if (!s.supported) {
      TS_RETURN_IF_ERROR(validate(op));
      return unimplemented(s.reason);
    }
    return std::visit([this](const auto& o) { return enqueue(o); }, op);
  }

  Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_range(dst, offset, bytes, "write"));
    if (bytes == 0) return ok_status();
    cl_int e = clEnqueueWriteBuffer(queue_, static_cast<ClBuffer&>(dst).mem(), CL_TRUE, offset, bytes, src, 0, nullptr,
                                    nullptr);
    return e == CL_SUCCESS ? ok_status() : internal_error(cl_error("clEnqueueWriteBuffer", e));
  }
  Status read(Buffer& src, size_t offset, void* dst, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_range(src, offset, bytes, "read"));
    if (bytes == 0) return ok_status();
    cl_int e = clEnqueueReadBuffer(queue_, static_cast<ClBuffer&>(src).mem(), CL_TRUE, offset, bytes, dst, 0, nullptr,
                                   nullptr);
    TS_RETURN_IF_ERROR(e == CL_SUCCESS ? ok_status() : internal_error(cl_error("clEnqueueReadBuffer", e)));
    return take_kernel_error();
  }
  Status synchronize() override {
    cl_int e = clFinish(queue_);
    if (e != CL_SUCCESS) return internal_error(cl_error("clFinish", e));
    return take_kernel_error();
  }
  // One non-blocking clEnqueueRead/WriteBuffer per run, then one clFinish: the host memory is the caller's
  // again when this returns, and the queue is not drained once per run.
  Status copy_runs(Buffer& buffer, HostStaging& staging, std::span<const CopyRun> runs, CopyDirection dir) override {
    TS_RETURN_IF_ERROR(check_runs(buffer, staging, runs));
    cl_mem m = static_cast<ClBuffer&>(buffer).mem();
    std::byte* host = staging.bytes().data();
    const bool to_host = dir == CopyDirection::kToHost;
    cl_int e = CL_SUCCESS;
    for (const CopyRun& r : runs) {
      if (r.bytes == 0) continue;
      e = to_host ? clEnqueueReadBuffer(queue_, m, CL_FALSE, r.device_offset, r.bytes, host + r.host_offset, 0, nullptr,
                                        nullptr)
                  : clEnqueueWriteBuffer(queue_, m, CL_FALSE, r.device_offset, r.bytes, host + r.host_offset, 0,
                                         nullptr, nullptr);
      if (e != CL_SUCCESS) break;
    }
    const cl_int finished = clFinish(queue_);
    if (e != CL_SUCCESS) return internal_error(cl_error(to_host ? "clEnqueueReadBuffer" : "clEnqueueWriteBuffer", e));
    if (finished != CL_SUCCESS) return internal_error(cl_error("clFinish", finished));
    return to_host ? take_kernel_error() : ok_status();
  }

 private:
  explicit ClStream(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  static Status check_range(Buffer& b, size_t offset, size_t bytes, const char* what) {
    if (offset > b.size() || bytes > b.size() - offset) {
      return out_of_range(
          fmt::format("{} of {} bytes at offset {} runs past a {}-byte buffer", what, bytes, offset, b.size()));
    }
    return ok_status();
  }

  Status take_kernel_error() {
    cl_int flag = 0;
    cl_int e = clEnqueueReadBuffer(queue_, err_, CL_TRUE, 0, sizeof flag, &flag, 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return internal_error(cl_error("clEnqueueReadBuffer", e));
    if (flag == 0) return ok_status();
    const cl_int zero = 0;
    clEnqueueWriteBuffer(queue_, err_, CL_TRUE, 0, sizeof zero, &zero, 0, nullptr, nullptr);
    return out_of_range("opencl: a token id, KV slot or block number was outside its range");
  }

  cl_kernel kernel(const char* name) {
    for (auto& [n, k] : kernels_) {
      if (n == name) return k;
    }
    return nullptr;
  }

  // Sets the arguments in order and enqueues `name` over a 1-D or 2-D range (nothing when it is empty).
  // While recording (rec_ set) the kernel is a new object of its own whose arguments stay bound, appended
  // to the recording instead of enqueued.
  template <typename... Args>
  Status launch(const char* name, std::initializer_list<size_t> global, const Args&... args) {
    cl_kernel k = kernel(name);
    if (k == nullptr) return internal_error(fmt::format("opencl: kernel {} is missing from the program", name));
    for (size_t g : global) {
      if (g == 0) return ok_status();
    }
    cl_int e = CL_SUCCESS;
    if (rec_) {
      k = clCreateKernel(shared_->program, name, &e);
      if (e != CL_SUCCESS) return internal_error(cl_error(fmt::format("clCreateKernel({})", name).c_str(), e));
    }
    cl_uint i = 0;
    ((e = e == CL_SUCCESS ? clSetKernelArg(k, i++, sizeof(Args), &args) : e), ...);
    if (e != CL_SUCCESS) {
      if (rec_) clReleaseKernel(k);
      return internal_error(cl_error(fmt::format("clSetKernelArg({})", name).c_str(), e));
    }
    if (rec_) {
      BoundKernel b{k, static_cast<cl_uint>(global.size()), {1, 1}};
      std::copy(global.begin(), global.end(), b.global);
      rec_->push_back(b);
      return ok_status();
    }
    std::vector<size_t> g(global);
    e = clEnqueueNDRangeKernel(queue_, k, static_cast<cl_uint>(g.size()), nullptr, g.data(), nullptr, 0, nullptr,
                               nullptr);
    return e == CL_SUCCESS ? ok_status() : internal_error(cl_error(name, e));
  }

  Result<cl_mem> scratch(size_t bytes) {
    if (rec_) {  // a recording has its own scratch, sized for its largest attention before recording
      if (bytes > rec_scratch_bytes_) return internal_error("opencl: recorded attention outgrew its scratch");
      return rec_scratch_;
    }
    if (bytes > scratch_bytes_) {
      if (scratch_) clReleaseMemObject(scratch_);
      cl_int e = CL_SUCCESS;
      scratch_ = clCreateBuffer(shared_->context, CL_MEM_READ_WRITE, bytes, nullptr, &e);
      if (e != CL_SUCCESS) {
        scratch_ = nullptr;
        scratch_bytes_ = 0;
        return resource_exhausted(cl_error("allocating attention scratch", e));
      }
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  static size_t sz(int64_t v) { return static_cast<size_t>(v); }
  static cl_int i32(int64_t v) { return static_cast<cl_int>(v); }

  Status enqueue(const EmbeddingOp& o) {
    return launch("embedding", {sz(o.ids.dim(0)), sz(o.table.dim(1))}, mem_of(o.table), elem_off(o.table),
                  mem_of(o.ids), elem_off(o.ids), mem_of(o.out), elem_off(o.out), i32(o.table.dim(1)),
                  i32(o.table.dim(0)), o.scale, err_);
  }
  Status enqueue(const RmsNormOp& o) {
    return launch("rms_norm", {sz(o.x.dim(0))}, mem_of(o.x), elem_off(o.x), mem_of(o.weight), elem_off(o.weight),
                  mem_of(o.out), elem_off(o.out), i32(o.x.dim(1)), o.eps);
  }
  Status enqueue(const AddRmsNormOp& o) {
    return launch("add_rms_norm", {sz(o.residual.dim(0))}, mem_of(o.residual), elem_off(o.residual), mem_of(o.delta),
                  elem_off(o.delta), mem_of(o.weight), elem_off(o.weight), mem_of(o.out), elem_off(o.out),
                  i32(o.residual.dim(1)), o.eps);
  }
  Status enqueue(const RopeOp& o) {
    const int64_t rot = o.rotated(o.q.dim(2));
    return launch("rope", {sz(o.q.dim(0)), sz(rot / 2)}, mem_of(o.q), elem_off(o.q), mem_of(o.k), elem_off(o.k),
                  mem_of(o.positions), elem_off(o.positions), i32(o.q.dim(1)), i32(o.k.dim(1)), i32(o.q.dim(2)),
                  i32(rot), o.theta, cl_int{o.layout == RopeLayout::kInterleaved ? 1 : 0},
                  mem_of(o.freqs.valid() ? o.freqs : o.positions), elem_off(o.freqs.valid() ? o.freqs : o.positions),
                  cl_int{o.freqs.valid() ? 1 : 0}, o.mscale);
  }
  Status enqueue(const KvWriteOp& o) {
    const DType ct = o.k_cache.dtype;
    if (ct == DType::kQ8_0 || ct == DType::kQ4_0) {
      return launch("kv_write_block", {sz(o.k.dim(0)), sz(o.k.row_elems() / 32)}, mem_of(o.k), elem_off(o.k),
                    mem_of(o.v), elem_off(o.v), mem_of(o.k_cache), elem_off(o.k_cache), mem_of(o.v_cache),
                    elem_off(o.v_cache), mem_of(o.slots), elem_off(o.slots), i32(o.k.row_elems()),
                    i32(o.k_cache.dim(0) * o.k_cache.dim(1)), cl_int{ct == DType::kQ8_0 ? 1 : 0}, err_);
    }
    const char* name = ct == DType::kF16 ? "kv_write_f16" : ct == DType::kBF16 ? "kv_write_bf16" : "kv_write_f32";
    return launch(name, {sz(o.k.dim(0)), sz(o.k.row_elems())}, mem_of(o.k), elem_off(o.k), mem_of(o.v), elem_off(o.v),
                  mem_of(o.k_cache), elem_off(o.k_cache), mem_of(o.v_cache), elem_off(o.v_cache), mem_of(o.slots),
                  elem_off(o.slots), i32(o.k.row_elems()), i32(o.k_cache.dim(0) * o.k_cache.dim(1)), err_);
  }
  // Bytes of scratch an operator needs (attention scores; MoE hidden rows and expert outputs), as enqueue uses it.
  static size_t scores_bytes(const Op& op) {
    int64_t floats = 0;
    if (const auto* a = std::get_if<AttentionPrefillOp>(&op)) {
      floats = a->q.dim(0) * a->q.dim(1) * (a->start_pos + a->q.dim(0));
    } else if (const auto* d = std::get_if<AttentionDecodeOp>(&op)) {
      floats = d->q.dim(0) * d->q.dim(1) * d->block_tables.dim(1) * d->k_cache.dim(1);
    } else if (const auto* m = std::get_if<MoeExpertsOp>(&op)) {
      floats = moe_scratch_floats(*m);
    }
    return sz(std::max<int64_t>(1, floats)) * sizeof(float);
  }
  // h [n k, ff] then y [n k, dim].
  static int64_t moe_ff(const MoeExpertsOp& o) { return o.gate_up.valid() ? o.gate_up.dim(1) / 2 : o.gate.dim(1); }
  static int64_t moe_scratch_floats(const MoeExpertsOp& o) {
    return o.x.dim(0) * o.ids.dim(1) * (moe_ff(o) + o.x.dim(1));
  }
  static const char* moe_suffix(DType t) {
    switch (t) {
      case DType::kF16:
        return "f16";
      case DType::kQ8_0:
        return "q8_0";
      case DType::kQ4_0:
        return "q4_0";
      case DType::kQ4_K:
        return "q4_k";
      case DType::kQ6_K:
        return "q6_k";
      default:
        return "f32";
    }
  }

 public:
  tessera::Result<std::unique_ptr<Recording>> record(std::span<const Op> ops) override {
    size_t bytes = 0;
    for (const Op& op : ops) {
      if (Support s = capability(op); !s.supported) {
        TS_RETURN_IF_ERROR(validate(op));
        return unimplemented(s.reason);
      }
      bytes = std::max(bytes, scores_bytes(op));
    }
    cl_int e = CL_SUCCESS;
    cl_mem scores = clCreateBuffer(shared_->context, CL_MEM_READ_WRITE, bytes, nullptr, &e);
    if (e != CL_SUCCESS) return resource_exhausted(cl_error("allocating a recording's attention scratch", e));
    std::vector<BoundKernel> kernels;
    rec_ = &kernels;
    rec_scratch_ = scores;
    rec_scratch_bytes_ = bytes;
    Status st = ok_status();
    for (const Op& op : ops) {
      st = std::visit([this](const auto& o) { return enqueue(o); }, op);
      if (!st.ok()) break;
    }
    rec_ = nullptr;
    rec_scratch_ = nullptr;
    rec_scratch_bytes_ = 0;
    auto rec = std::make_unique<ClRecording>(queue_, std::move(kernels), scores);  // owns them, even on error
    TS_RETURN_IF_ERROR(st);
    rec->try_command_buffer(shared_->command_buffer);
    return std::unique_ptr<Recording>(std::move(rec));
  }

 private:
  Status attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& tables, int64_t table_stride,
                   const Tensor& lens, int32_t start_pos, bool decode, const Tensor& out, int64_t max_ctx,
                   const AttentionScores& opt, const Tensor& sinks) {
    const int64_t count = q.dim(0), heads = q.dim(1);
    TS_ASSIGN_OR_RETURN(cl_mem s, scratch(sz(std::max<int64_t>(1, count * heads * max_ctx)) * sizeof(float)));
    const char* name = kc.dtype == DType::kF16    ? "attention_f16"
                       : kc.dtype == DType::kBF16 ? "attention_bf16"
                       : kc.dtype == DType::kQ8_0 ? "attention_q8_0"
                       : kc.dtype == DType::kQ4_0 ? "attention_q4_0"
                                                  : "attention_f32";
    return launch(name, {sz(count), sz(heads)}, mem_of(q), elem_off(q), mem_of(kc), elem_off(kc), mem_of(vc),
                  elem_off(vc), mem_of(tables), elem_off(tables), i32(table_stride), mem_of(lens), elem_off(lens),
                  cl_int{start_pos}, cl_int{decode ? 1 : 0}, mem_of(out), elem_off(out), s, i32(max_ctx), i32(heads),
                  i32(kc.dim(2)), i32(kc.dim(3)), i32(kc.dim(1)), i32(kc.dim(0)), opt.scale, opt.softcap,
                  cl_int{opt.window}, mem_of(sinks.valid() ? sinks : q), elem_off(sinks.valid() ? sinks : q),
                  cl_int{sinks.valid() ? 1 : 0}, err_);
  }
  Status enqueue(const AttentionPrefillOp& o) {
    return attention(o.q, o.k_cache, o.v_cache, o.block_table, o.block_table.dim(0), o.block_table, o.start_pos, false,
                     o.out, o.start_pos + o.q.dim(0), o.scores, o.sinks);
  }
  Status enqueue(const AttentionDecodeOp& o) {
    const int64_t stride = o.block_tables.dim(1);
    return attention(o.q, o.k_cache, o.v_cache, o.block_tables, stride, o.context_lens, 0, true, o.out,
                     stride * o.k_cache.dim(1), o.scores, o.sinks);
  }
  Status enqueue(const MatMulOp& o) {
    const char* name = matmul_kernel(o.w.dtype);
    const Tensor& bias = o.bias.valid() ? o.bias : o.x;
    return launch(name, {sz(o.w.dim(0)), sz(o.x.dim(0))}, mem_of(o.x), elem_off(o.x), mem_of(o.w), elem_off(o.w),
                  mem_of(o.out), elem_off(o.out), mem_of(bias), elem_off(bias), cl_int{o.bias.valid() ? 1 : 0},
                  i32(o.x.dim(1)), i32(o.w.dim(0)));
  }
  Status enqueue(const SiluMulOp& o) {
    const cl_int act = o.act == Activation::kGeluTanh ? 1 : o.act == Activation::kSigmoid ? 2 : 0;
    // A sigmoid gate of one value per row ([n, 1], validate()) covers up's whole row.
    const cl_ulong per = o.gate.numel() == o.up.numel() ? 1 : static_cast<cl_ulong>(o.up.row_elems());
    return launch("silu_mul", {sz(o.up.numel())}, mem_of(o.gate), elem_off(o.gate), mem_of(o.up), elem_off(o.up),
                  mem_of(o.out), elem_off(o.out), act, per);
  }
  Status enqueue(const SplitHeadsOp& o) {
    const int64_t d = o.a.dim(2);
    return launch("split_heads", {sz(o.a.dim(0) * o.a.dim(1)), sz(d)}, mem_of(o.x), elem_off(o.x), mem_of(o.a),
                  elem_off(o.a), mem_of(o.b), elem_off(o.b), i32(d));
  }
  Status enqueue(const CausalConv1dOp& o) {
    return launch("causal_conv1d", {sz(o.x.dim(1))}, mem_of(o.x), elem_off(o.x), mem_of(o.weight), elem_off(o.weight),
                  mem_of(o.state), elem_off(o.state), mem_of(o.out), elem_off(o.out), i32(o.x.dim(0)), i32(o.x.dim(1)),
                  i32(o.weight.dim(1)), cl_int{o.reset ? 1 : 0});
  }
  Status enqueue(const GatedDeltaRuleOp& o) {
    const int64_t hv = o.state.dim(0), s = o.state.dim(1);
    return launch("gated_delta_rule", {sz(hv), sz(s)}, mem_of(o.qkv), elem_off(o.qkv), mem_of(o.alpha),
                  elem_off(o.alpha), mem_of(o.beta), elem_off(o.beta), mem_of(o.dt_bias), elem_off(o.dt_bias),
                  mem_of(o.a), elem_off(o.a), mem_of(o.state), elem_off(o.state), mem_of(o.out), elem_off(o.out),
                  i32(o.qkv.dim(0)), i32(hv), cl_int{o.k_heads}, i32(s), o.eps, cl_int{o.reset ? 1 : 0});
  }
  Status enqueue(const AddOp& o) {
    return launch("add", {sz(o.a.numel())}, mem_of(o.a), elem_off(o.a), mem_of(o.b), elem_off(o.b), mem_of(o.out),
                  elem_off(o.out));
  }
  Status enqueue(const SoftmaxOp& o) {
    return launch("softmax", {sz(o.x.dim(0))}, mem_of(o.x), elem_off(o.x), mem_of(o.out), elem_off(o.out),
                  i32(o.x.dim(1)));
  }
  Status enqueue(const LayerNormOp& o) {
    const Tensor& bias = o.bias.valid() ? o.bias : o.weight;
    return launch("layer_norm", {sz(o.x.dim(0))}, mem_of(o.x), elem_off(o.x), mem_of(o.weight), elem_off(o.weight),
                  mem_of(bias), elem_off(bias), cl_int{o.bias.valid() ? 1 : 0}, mem_of(o.out), elem_off(o.out),
                  i32(o.x.dim(1)), o.eps);
  }
  Status enqueue(const ActivationOp& o) {
    const cl_int act = o.act == Activation::kGeluErf    ? 3
                       : o.act == Activation::kGeluTanh ? 1
                       : o.act == Activation::kTanh     ? 5
                                                        : 0;
    return launch("activation", {sz(o.x.numel())}, mem_of(o.x), elem_off(o.x), mem_of(o.out), elem_off(o.out), act);
  }
  Status enqueue(const AttentionNonCausalOp& o) {
    const int64_t hd = o.q.dim(2);
    const float scale = o.scale > 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(hd));
    return launch("attention_noncausal", {sz(o.q.dim(0)), sz(o.q.dim(1))}, mem_of(o.q), elem_off(o.q), mem_of(o.k),
                  elem_off(o.k), mem_of(o.v), elem_off(o.v), mem_of(o.out), elem_off(o.out), i32(o.q.dim(0)),
                  i32(o.q.dim(1)), i32(o.k.dim(1)), i32(hd), scale);
  }
  Status enqueue(const PoolOp& o) {
    const cl_int kind = o.kind == PoolKind::kMean ? 0 : o.kind == PoolKind::kFirst ? 1 : 2;
    return launch("pool", {sz(o.x.dim(1))}, mem_of(o.x), elem_off(o.x), mem_of(o.out), elem_off(o.out), i32(o.x.dim(0)),
                  i32(o.x.dim(1)), kind);
  }
  Status enqueue(const ScaleOp& o) {
    return launch("scale", {sz(o.x.numel())}, mem_of(o.x), elem_off(o.x), mem_of(o.out), elem_off(o.out), o.scale);
  }
  Status enqueue(const ArgmaxOp& o) {
    return launch("argmax", {sz(o.x.dim(0))}, mem_of(o.x), elem_off(o.x), mem_of(o.out), elem_off(o.out),
                  i32(o.x.dim(1)));
  }
  Status enqueue(const MoeRouteOp& o) {
    const Tensor& bias = o.bias.valid() ? o.bias : o.logits;
    const cl_int gating = o.gating == MoeGating::kSoftmax ? 0 : o.gating == MoeGating::kSigmoid ? 1 : 2;
    return launch("moe_route", {sz(o.logits.dim(0))}, mem_of(o.logits), elem_off(o.logits), mem_of(bias),
                  elem_off(bias), cl_int{o.bias.valid() ? 1 : 0}, mem_of(o.ids), elem_off(o.ids), mem_of(o.weights),
                  elem_off(o.weights), i32(o.logits.dim(1)), i32(o.ids.dim(1)), gating, cl_int{o.normalize ? 1 : 0},
                  o.scale, mem_of(o.expert_scale.valid() ? o.expert_scale : o.logits),
                  elem_off(o.expert_scale.valid() ? o.expert_scale : o.logits), cl_int{o.expert_scale.valid() ? 1 : 0});
  }
  Status enqueue(const MoeExpertsOp& o) {
    const bool fused = o.gate_up.valid();
    const Tensor& gw = fused ? o.gate_up : o.gate;
    const Tensor& uw = fused ? o.gate_up : o.up;
    const int64_t n = o.x.dim(0), k = o.ids.dim(1), dim = o.x.dim(1), ff = moe_ff(o), experts = gw.dim(0);
    if (n == 0) return ok_status();
    TS_ASSIGN_OR_RETURN(cl_mem s, scratch(sz(std::max<int64_t>(1, moe_scratch_floats(o))) * sizeof(float)));
    const cl_ulong y_off = static_cast<cl_ulong>(n * k * ff);
    auto bytes = [](const Tensor& t) { return static_cast<cl_ulong>(t.offset); };
    const Tensor& gb = o.gate_bias.valid() ? o.gate_bias : o.x;
    const Tensor& ub = o.up_bias.valid() ? o.up_bias : o.x;
    const Tensor& db = o.down_bias.valid() ? o.down_bias : o.x;
    const cl_int act = o.act == Activation::kGeluTanh ? 1 : o.act == Activation::kSwigluOai ? 2 : 0;
    const std::string gate_up = std::string("moe_gate_up_") + moe_suffix(gw.dtype);
    TS_RETURN_IF_ERROR(launch(gate_up.c_str(), {sz(ff), sz(n * k)}, mem_of(o.x), elem_off(o.x), mem_of(o.ids),
                              elem_off(o.ids), mem_of(gw), bytes(gw), mem_of(uw), bytes(uw), cl_int{fused ? 1 : 0},
                              mem_of(gb), elem_off(gb), cl_int{o.gate_bias.valid() ? 1 : 0}, mem_of(ub), elem_off(ub),
                              cl_int{o.up_bias.valid() ? 1 : 0}, s, cl_ulong{0}, i32(k), i32(dim), i32(ff),
                              i32(experts), act, o.alpha, o.limit, err_));
    const std::string down = std::string("moe_down_") + moe_suffix(o.down.dtype);
    TS_RETURN_IF_ERROR(launch(down.c_str(), {sz(dim), sz(n * k)}, s, cl_ulong{0}, mem_of(o.ids), elem_off(o.ids),
                              mem_of(o.down), bytes(o.down), mem_of(db), elem_off(db),
                              cl_int{o.down_bias.valid() ? 1 : 0}, s, y_off, i32(k), i32(dim), i32(ff), i32(experts)));
    return launch("moe_combine", {sz(dim), sz(n)}, s, y_off, mem_of(o.weights), elem_off(o.weights), mem_of(o.out),
                  elem_off(o.out), i32(k), i32(dim));
  }

  std::shared_ptr<Shared> shared_;
  cl_command_queue queue_ = nullptr;
  std::vector<std::pair<std::string, cl_kernel>> kernels_;
  cl_mem err_ = nullptr;
  cl_mem scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::vector<BoundKernel>* rec_ = nullptr;  // while record() runs
  cl_mem rec_scratch_ = nullptr;
  size_t rec_scratch_bytes_ = 0;
};

class ClDevice final : public Device {
 public:
  ClDevice(std::shared_ptr<Shared> shared, DeviceInfo info, size_t max_alloc)
      : shared_(std::move(shared)), info_(std::move(info)), max_alloc_(max_alloc) {}
  const DeviceInfo& info() const override { return info_; }

  tessera::Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    if (bytes > max_alloc_) {
      return resource_exhausted(
          fmt::format("opencl: {} bytes exceed the device's largest allocation of {} bytes", bytes, max_alloc_));
    }
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(shared_->context, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 64), nullptr, &e);
    if (e != CL_SUCCESS) return resource_exhausted(cl_error(fmt::format("allocating {} bytes", bytes).c_str(), e));
    auto buf = std::make_unique<ClBuffer>(m, bytes);
    // Zeroed, like host backends' memory.
    std::vector<uint8_t> zeros(std::max<size_t>(bytes, 64), 0);
    std::lock_guard<std::mutex> lock(mu_);
    if (!init_queue_) init_queue_ = clCreateCommandQueue(shared_->context, shared_->device, 0, &e);
    if (e == CL_SUCCESS)
      e = clEnqueueWriteBuffer(init_queue_, m, CL_TRUE, 0, zeros.size(), zeros.data(), 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return resource_exhausted(cl_error("initialising a buffer", e));
    return std::unique_ptr<Buffer>(std::move(buf));
  }
  Support supports(const Op& op) const override { return capability(op); }
  std::unique_ptr<Stream> create_stream() override {
    auto s = ClStream::create(shared_);
    TS_CHECK(s.ok());  // the program built at open; a queue and kernels failing now is a broken driver
    return std::move(s).value();
  }
  ~ClDevice() override {
    if (init_queue_) clReleaseCommandQueue(init_queue_);
  }

 private:
  std::shared_ptr<Shared> shared_;
  DeviceInfo info_;
  size_t max_alloc_;
  std::mutex mu_;
  cl_command_queue init_queue_ = nullptr;
};

// Builds the program from the on-disk binary when one matches, else from source (then stores the binary).
// `how` says which happened.
Status build_program(Shared& s, const std::string& cache_dir, std::string& how) {
  const std::string source = kKernelSource;
  const std::string id = device_string(s.device, CL_DEVICE_NAME) + "|" + device_string(s.device, CL_DEVICE_VERSION) +
                         "|" + device_string(s.device, CL_DRIVER_VERSION);
  const std::string path =
      fmt::format("{}/kernels-{:016x}.bin", cache_dir, fnv1a(source + '\0' + id + '\0' + kBuildOptions));
  cl_int e = CL_SUCCESS;
  if (std::ifstream f(path, std::ios::binary); f) {
    std::vector<unsigned char> bin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const unsigned char* p = bin.data();
    const size_t n = bin.size();
    cl_int bin_status = CL_SUCCESS;
    s.program = clCreateProgramWithBinary(s.context, 1, &s.device, &n, &p, &bin_status, &e);
    if (e == CL_SUCCESS && bin_status == CL_SUCCESS &&
        clBuildProgram(s.program, 1, &s.device, kBuildOptions, nullptr, nullptr) == CL_SUCCESS) {
      how = "kernels from the binary cache";
      return ok_status();
    }
    if (s.program) clReleaseProgram(s.program);
    s.program = nullptr;
  }
  const char* src = source.c_str();
  s.program = clCreateProgramWithSource(s.context, 1, &src, nullptr, &e);
  if (e != CL_SUCCESS) return internal_error(cl_error("clCreateProgramWithSource", e));
  e = clBuildProgram(s.program, 1, &s.device, kBuildOptions, nullptr, nullptr);
  if (e != CL_SUCCESS) {
    size_t n = 0;
    clGetProgramBuildInfo(s.program, s.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    clGetProgramBuildInfo(s.program, s.device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    return internal_error(fmt::format("opencl: the kernels did not compile for {}: {}",
                                      device_string(s.device, CL_DEVICE_NAME), log.substr(0, 2000)));
  }
  how = "kernels compiled from source";
  size_t bin_size = 0;
  if (clGetProgramInfo(s.program, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, nullptr) == CL_SUCCESS &&
      bin_size > 0) {
    std::vector<unsigned char> bin(bin_size);
    unsigned char* p = bin.data();
    if (clGetProgramInfo(s.program, CL_PROGRAM_BINARIES, sizeof p, &p, nullptr) == CL_SUCCESS) {
      std::error_code ec;
      std::filesystem::create_directories(cache_dir, ec);
      const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
      std::ofstream out(tmp, std::ios::binary);
      if (out.write(reinterpret_cast<const char*>(bin.data()), static_cast<std::streamsize>(bin.size()))) {
        out.close();
        std::filesystem::rename(tmp, path, ec);  // atomic: concurrent processes never see half a file
        if (!ec) how += ", stored in the binary cache";
      }
      std::filesystem::remove(tmp, ec);
    }
  }
  return ok_status();
}

class ClBackend final : public Backend {
 public:
  explicit ClBackend(std::vector<std::pair<cl_platform_id, cl_device_id>> devices) : devices_(std::move(devices)) {}
  std::string_view name() const override { return "opencl"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  tessera::Result<std::unique_ptr<Device>> open_device(int index) override { return open_device_with(index, {}); }

  tessera::Result<std::unique_ptr<Device>> open_device_with(int index, const DeviceOptions& options) override {
    if (index < 0 || index >= device_count()) return not_found(fmt::format("opencl has no device {}", index));
    auto shared = std::make_shared<Shared>();
    shared->device = devices_[static_cast<size_t>(index)].second;
    cl_uint units = 0;
    clGetDeviceInfo(shared->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, nullptr);
    std::string threads_note;
    if (options.threads > 0 && static_cast<cl_uint>(options.threads) < units) {
      const cl_device_partition_property props[] = {CL_DEVICE_PARTITION_BY_COUNTS, options.threads,
                                                    CL_DEVICE_PARTITION_BY_COUNTS_LIST_END, 0};
      cl_device_id sub = nullptr;
      cl_uint n = 0;
      if (clCreateSubDevices(shared->device, props, 1, &sub, &n) == CL_SUCCESS && n == 1) {
        shared->device = sub;
        shared->sub_device = true;
        units = static_cast<cl_uint>(options.threads);
      } else {
        threads_note = ", could not partition to the requested threads";
      }
    }
    cl_int e = CL_SUCCESS;
    shared->context = clCreateContext(nullptr, 1, &shared->device, nullptr, nullptr, &e);
    if (e != CL_SUCCESS) return unavailable(cl_error("clCreateContext", e));
    std::string how;
    TS_RETURN_IF_ERROR(
        build_program(*shared, options.cache_dir.empty() ? default_cache_dir() : options.cache_dir, how));
    shared->command_buffer = CommandBufferApi::load(shared->device);
    how += shared->command_buffer.available() ? "; graphs: cl_khr_command_buffer"
                                              : "; graphs: kernel lists (" + shared->command_buffer.why_not + ")";
    DeviceInfo info;
    info.backend = "opencl";
    info.name = fmt::format("{} ({}, {} compute units{}; {})", device_string(shared->device, CL_DEVICE_NAME),
                            device_string(shared->device, CL_DEVICE_VERSION), units, threads_note, how);
    cl_ulong mem = 0, max_alloc = 0;
    clGetDeviceInfo(shared->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, nullptr);
    clGetDeviceInfo(shared->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, nullptr);
    info.memory_bytes = mem;
    info.host_visible = false;
    info.supports_graphs = true;  // ClStream::record
    return std::unique_ptr<Device>(new ClDevice(std::move(shared), std::move(info), max_alloc));
  }

 private:
  std::vector<std::pair<cl_platform_id, cl_device_id>> devices_;
};

}  // namespace

tessera::Result<std::unique_ptr<Backend>> create_backend() {
  cl_uint n_platforms = 0;
  cl_int e = clGetPlatformIDs(0, nullptr, &n_platforms);
  if (e != CL_SUCCESS || n_platforms == 0) {
    return unavailable(
        fmt::format("opencl: no OpenCL platform found (CL error {}); install an ICD such as pocl-opencl-icd", e));
  }
  std::vector<cl_platform_id> platforms(n_platforms);
  clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
  std::vector<std::pair<cl_platform_id, cl_device_id>> devices;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> ds(n);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ds.data(), nullptr);
    for (cl_device_id d : ds) devices.emplace_back(p, d);
  }
  if (devices.empty()) return unavailable("opencl: OpenCL platforms exist but none has a device");
  return std::unique_ptr<Backend>(new ClBackend(std::move(devices)));
}

}  // namespace tessera::ops::opencl
