// The cuda backend widens every stored weight type inside its kernels (dq in src/ops/cuda/kernels.cu). The same
// decoder, compiled for the host, must give base/quant's dequantize() bit for bit on every type: the part of
// the cuda kernels that can be checked on a machine without a GPU (scripts/gpu-check.sh runs the rest).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/cuda/kernels.h"

namespace tessera::ops::cuda {
namespace {

TEST(CudaDecoder, EveryStoredTypeWidensBitForBitAsBaseQuant) {
  Rng rng(7);
  int checked = 0;
  for (DType t : all_dtypes()) {
    if (t == DType::kI32) continue;
    SCOPED_TRACE(std::string(dtype_name(t)));
    const size_t k = 4 * 256;  // four super-blocks, 32 classic blocks
    std::vector<float> src(k);
    for (float& v : src) v = (rng.next_f32() * 2.0f - 1.0f) * 3.0f;
    src[5] = 0.0f;
    src[6] = 6.0e-6f;  // an f16 subnormal
    std::vector<uint8_t> bytes(dtype_bytes(t, k));
    ASSERT_TRUE(quantize(src, t, bytes.data()).ok());
    std::vector<float> want(k), got(k);
    ASSERT_TRUE(dequantize(bytes.data(), t, want).ok());
    cuda_dequantize_row(static_cast<int>(t), bytes.data(), static_cast<int64_t>(k), got.data());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), k * sizeof(float)), 0)
        << "first difference at " << (std::mismatch(want.begin(), want.end(), got.begin()).first - want.begin());
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

}  // namespace
}  // namespace tessera::ops::cuda
