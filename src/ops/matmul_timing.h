// Timing of one matrix product on a device, for `tessera bench matmul`: the kernel alone, without a model around
// it (prefill shapes, the batch size where a kernel changes, a kernel variant against another).
//
// The weight [m, k] is random values quantised to the requested type and uploaded as the engine uploads its
// matrices (Device::prepare_matmul_weight included, so repacked layouts are what is timed); the activations
// [n, k] are random f32. Each run is one MatMulOp on one stream, synchronised; the result keeps every run's time.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops {

struct MatMulShape {
  DType weight = DType::kQ8_0;
  int64_t n = 1, k = 768, m = 2048;  // activation rows, inner size, weight rows
};

struct MatMulTiming {
  std::vector<double> seconds;  // one per timed run (after one untimed warm-up run)
  double best() const;
  double median() const;
  // Multiply-adds per second of the fastest run.
  double best_macs_per_s(const MatMulShape& s) const;
};

// InvalidArgument for a shape the weight type cannot hold (k not a whole number of blocks, sizes < 1) or runs < 1;
// the device's own error when it refuses the product.
Result<MatMulTiming> time_matmul(Device& device, const MatMulShape& shape, int runs);

}  // namespace tessera::ops
