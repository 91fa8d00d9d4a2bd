// What the operator timings (ops/matmul_timing.h, ops/attention_timing.h) share: the best and median of a run's
// times, and tensors allocated on the timed device and uploaded through its stream, kept alive together.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

// The most elements a timing fills with random values on the host (4 bytes each before conversion): 1 Gi, 4 GiB.
constexpr int64_t kMaxTimedElements = int64_t{1} << 30;

// InvalidArgument naming `what` when a timed tensor of `elems` elements is over kMaxTimedElements (a size the host
// would fail to allocate is a clear error, not an abort).
Status check_timed_elements(double elems, const char* what);

double best_seconds(const std::vector<double>& seconds);    // 0 when empty
double median_seconds(const std::vector<double>& seconds);  // 0 when empty

class TimedTensors {
 public:
  TimedTensors(Device& device, Stream& stream) : device_(device), stream_(stream) {}
  // A tensor of `type` and `dims` in a buffer of its own, `host` (when given) uploaded into it.
  Result<Tensor> make(DType type, std::initializer_list<int64_t> dims, const void* host);

 private:
  Device& device_;
  Stream& stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace tessera::ops
