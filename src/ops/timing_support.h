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
