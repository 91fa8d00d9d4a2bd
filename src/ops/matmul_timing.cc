#include "ops/matmul_timing.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <fmt/core.h>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/timing_support.h"

namespace tessera::ops {

double MatMulTiming::best() const { return best_seconds(seconds); }

double MatMulTiming::median() const { return median_seconds(seconds); }

double MatMulTiming::best_macs_per_s(const MatMulShape& s) const {
  const double t = best();
  return t > 0 ? static_cast<double>(s.n) * static_cast<double>(s.k) * static_cast<double>(s.m) / t : 0.0;
}

Result<MatMulTiming> time_matmul(Device& device, const MatMulShape& shape, int runs) {
  const int block = dtype_info(shape.weight).block_elems;
  if (shape.n < 1 || shape.k < 1 || shape.m < 1 || runs < 1) {
    return invalid_argument(fmt::format("matmul timing: rows, k, m and runs must be at least 1 (got {}, {}, {}, {})",
                                        shape.n, shape.k, shape.m, runs));
  }
  if (shape.k % block != 0) {
    return invalid_argument(fmt::format("matmul timing: k = {} is not a whole number of {}-element {} blocks", shape.k,
                                        block, dtype_name(shape.weight)));
  }
  TS_RETURN_IF_ERROR(
      check_timed_elements(static_cast<double>(shape.m) * static_cast<double>(shape.k), "matmul timing: the weight"));
  TS_RETURN_IF_ERROR(check_timed_elements(static_cast<double>(shape.n) * static_cast<double>(shape.k),
                                          "matmul timing: the activations"));
  auto stream = device.create_stream();
  TimedTensors tensors(device, *stream);
  Rng rng(1);
  std::vector<float> w(static_cast<size_t>(shape.m * shape.k)), x(static_cast<size_t>(shape.n * shape.k));
  for (float& v : w) v = rng.next_f32() - 0.5f;
  for (float& v : x) v = rng.next_f32() - 0.5f;
  std::vector<uint8_t> stored(dtype_bytes(shape.weight, w.size()));
  TS_RETURN_IF_ERROR(quantize(w, shape.weight, stored.data()));
  TS_ASSIGN_OR_RETURN(Tensor wt, tensors.make(shape.weight, {shape.m, shape.k}, stored.data()));
  TS_RETURN_IF_ERROR(stream->synchronize());
  TS_RETURN_IF_ERROR(device.prepare_matmul_weight(wt));
  TS_ASSIGN_OR_RETURN(Tensor xt, tensors.make(DType::kF32, {shape.n, shape.k}, x.data()));
  TS_ASSIGN_OR_RETURN(Tensor out, tensors.make(DType::kF32, {shape.n, shape.m}, nullptr));
  MatMulTiming timing;
  for (int r = -1; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    TS_RETURN_IF_ERROR(stream->run(MatMulOp{xt, wt, out}));
    TS_RETURN_IF_ERROR(stream->synchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) timing.seconds.push_back(s);
  }
  return timing;
}

}  // namespace tessera::ops
