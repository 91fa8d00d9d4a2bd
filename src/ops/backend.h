// Backend, Device, Buffer, Stream: how the engine reaches a device family without naming it.
//
//   Backend  one per device family ("ref", later "cpu", "opencl", "cuda"); enumerates and opens devices.
//   Device   allocates Buffers, answers capability queries, creates Streams.
//   Buffer   device memory; owned by whoever allocated it (std::unique_ptr).
//   HostStaging  host memory registered with a device for copies (pinned on cuda): where KV runs land.
//   Stream   an ordered queue of copies and operators. Operations on one stream run in submission order;
//            synchronize() waits for all of them. A failed operation's Status is returned by the call that
//            submitted it where the backend can tell at once, otherwise by the next synchronize().
//   Recording an operator list a stream recorded once (Stream::record, where DeviceInfo::supports_graphs)
//            and replays without re-validating, re-dispatching or re-binding arguments: CUDA Graphs on cuda,
//            a cl_khr_command_buffer or a list of argument-bound kernels on opencl, a pre-dispatched list on
//            cpu. What changes between replays (token ids, positions, slots, block tables, lengths) must be
//            in buffers the operators read, written before each replay; the values in the ops are fixed.
//
// Thread-safety: a Device may be shared by threads; a Stream is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ops/ops.h"

namespace tessera::ops {

class Device;

class Buffer {
 public:
  virtual ~Buffer() = default;
  size_t size() const { return size_; }
  // The host address of the memory when the device shares it with the host (ref, cpu), else nullptr.
  virtual void* host_ptr() = 0;

 protected:
  explicit Buffer(size_t size) : size_(size) {}

 private:
  size_t size_;
};

// Whether a device can run an operator with these exact dtypes and shapes, and if not, why.
struct Support {
  bool supported = true;
  std::string reason;  // empty when supported
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

struct DeviceInfo {
  std::string backend;  // registry name
  std::string name;     // human-readable device name
  size_t memory_bytes = 0;
  bool host_visible = false;     // Buffer::host_ptr() is non-null
  bool supports_graphs = false;  // Stream::record works (ops/graph.h replays through it)
  // A row's results have the same bits whatever else shares its batch and however many rows run (matmuls, norms,
  // decode attention), checked by a test (RunnerDeterministic.*): what engine::RunnerOptions::deterministic needs.
  // cpu and ref: yes; vulkan: no (a prompt chunked otherwise, or partly decoded, gives other bits); opencl, cuda: not
  // checked by a test.
  bool batch_invariant = false;
};

// How the engine will multiply by a weight matrix, for Device::prepare_matmul_weight.
struct WeightHints {
  // Mostly one activation row per sequence at a time: a classifier, which prefill applies to the last position
  // only, so its cost is decode's. A device may then keep the layout and kernels that are fastest for one row
  // (cpu amx: an f16 classifier stays on the f32 kernels rather than the bf16 tiles; ops/cpu/matmul_dense.cc).
  bool decode_bound = false;
};

class Recording {
 public:
  virtual ~Recording() = default;
  // Enqueues the recorded operators, in order, on the stream that recorded them (same thread rules as
  // that stream; it must outlive the recording). Errors the kernels flag surface at the next synchronize().
  virtual Status replay() = 0;
  // How the backend holds it, for logs and reports: "cuda graph", "cl_khr_command_buffer", ...
  virtual std::string_view kind() const = 0;
};

// Host memory a device copies runs to and from (copy_runs). A backend pins it where that makes the copies DMA
// (cuda: cudaHostRegister for the region's lifetime); elsewhere it only records the range. The memory stays
// the caller's and must outlive the registration.
class HostStaging {
 public:
  explicit HostStaging(std::span<std::byte> bytes) : bytes_(bytes) {}
  virtual ~HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  std::span<std::byte> bytes() const { return bytes_; }

 private:
  std::span<std::byte> bytes_;
};

// One contiguous run of bytes between a device buffer and a staging region: a run of whole KV rows (positions
// whose blocks are consecutive), one device copy.
struct CopyRun {
  size_t device_offset = 0;  // into the Buffer
  size_t host_offset = 0;    // into the HostStaging
  size_t bytes = 0;
};
enum class CopyDirection { kToHost, kToDevice };

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Status run(const Op& op) = 0;
  // Records `ops` for replay (nothing runs now). The tensors they name must stay valid while the recording
  // lives. InvalidArgument / Unimplemented for an op run() would refuse; Unimplemented where the device
  // does not support graphs.
  virtual Result<std::unique_ptr<Recording>> record(std::span<const Op> ops) {
    (void)ops;
    return unimplemented("this backend cannot record operator lists (DeviceInfo::supports_graphs is false)");
  }
  virtual Status write(Buffer& dst, size_t offset, const void* src, size_t bytes) = 0;
  virtual Status read(Buffer& src, size_t offset, void* dst, size_t bytes) = 0;
  virtual Status synchronize() = 0;
  // Host work between operators (the engine draws a step's tokens with it, one item per sequence): calls
  // fn(ctx, i) once for every i in [0, n) and returns when all are done. The cpu backend spreads the items over
  // its operator threads (idle between operators), one item per claim; the default runs them in order on the
  // calling thread. fn must not throw or use this stream; items must not depend on which thread runs them.
  using HostItemFn = void (*)(void* ctx, int64_t item);
  virtual void for_each_on_host(int64_t n, HostItemFn fn, void* ctx) {
    for (int64_t i = 0; i < n; ++i) fn(ctx, i);
  }
  // Copies each run between `buffer` and `staging`: exactly one device copy per run (opencl: one
  // clEnqueueRead/WriteBuffer; cuda: one cudaMemcpyAsync on this stream; ref, cpu: one memcpy). Every run is
  // bounds-checked on both sides first (OutOfRange, nothing copied). Complete when it returns. The default
  // calls read()/write() once per run; backends with asynchronous queues enqueue all runs, then wait once.
  virtual Status copy_runs(Buffer& buffer, HostStaging& staging, std::span<const CopyRun> runs, CopyDirection dir);

  // Convenience: copy a host array into / out of a tensor view (the whole view).
  Status upload(const Tensor& dst, const void* src);
  Status download(const Tensor& src, void* dst);
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  // ResourceExhausted when the memory is not there.
  virtual Result<std::unique_ptr<Buffer>> alloc(size_t bytes) = 0;
  virtual Support supports(const Op& op) const = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // Registers host memory for copy_runs (see HostStaging). The default records the range; cuda pins it.
  virtual Result<std::unique_ptr<HostStaging>> register_staging(std::span<std::byte> bytes) {
    return std::make_unique<HostStaging>(bytes);
  }
  // Called once for each weight matrix w [rows, cols] the engine has uploaded (whole buffer, offset 0, uploads
  // finished), before any operator reads it: a device may re-lay its bytes for its matmul kernels (cpu: panels of
  // rows, ops/cpu/repack.h). Afterwards w may only be a MatMulOp's weight or an EmbeddingOp's table (a tied
  // classifier shares the table; the device's lookup must then read its layout); the device refuses reads, writes
  // and other operators on its buffer. The default keeps the layout. `hints` say how the engine will use it.
  virtual Status prepare_matmul_weight(const Tensor& w, const WeightHints& hints = {}) {
    (void)w;
    (void)hints;
    return ok_status();
  }
};

// One device as `tessera inspect --devices` lists it: a heading and "key: value" lines (vulkaninfo-style on
// vulkan: type, API version, memory heaps, subgroups, limits).
struct DeviceDescription {
  std::string title;
  std::vector<std::pair<std::string, std::string>> properties;
};

// Settings a caller may pass when opening a device; a backend ignores those that do not apply to it.
struct DeviceOptions {
  int threads = 0;        // host threads for operators (cpu; opencl on a CPU device): 0 = backend default
  std::string cache_dir;  // where compiled kernels may be cached (opencl): empty = backend default
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int device_count() const = 0;
  virtual Result<std::unique_ptr<Device>> open_device(int index) = 0;
  // Like open_device(index), with settings; backends without settings need not override it.
  virtual Result<std::unique_ptr<Device>> open_device_with(int index, const DeviceOptions& options) {
    return open_device(index);
  }
  // Every device of this backend as `tessera inspect --devices` shows it. The default opens each device and
  // reports its DeviceInfo; a backend that can say more without opening (vulkan) overrides it.
  virtual Result<std::vector<DeviceDescription>> describe_devices();
};

}  // namespace tessera::ops
