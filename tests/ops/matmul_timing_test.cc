// The matmul timing behind `tessera bench matmul`: it times the product the engine would run (the weight prepared
// as the engine prepares it) and refuses shapes the weight type cannot hold.
#include <gtest/gtest.h>

#include "ops/matmul_timing.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

TEST(MatMulTiming, TimesEveryRunAndRefusesShapesTheTypeCannotHold) {
  register_builtin_backends();
  auto device = open_device("cpu", 0, DeviceOptions{1, ""});
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  const MatMulShape shape{DType::kQ4_K, 16, 512, 64};
  auto t = time_matmul(**device, shape, 3);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->seconds.size(), 3u);
  EXPECT_GT(t->best(), 0.0);
  EXPECT_LE(t->best(), t->median());
  EXPECT_NEAR(t->best_macs_per_s(shape), 16.0 * 512 * 64 / t->best(), 1e-6 * 16.0 * 512 * 64 / t->best());
  auto bad = time_matmul(**device, MatMulShape{DType::kQ4_K, 4, 100, 8}, 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("256-element q4_k blocks"), std::string::npos) << bad.status().message();
  EXPECT_EQ(time_matmul(**device, MatMulShape{DType::kF32, 4, 64, 8}, 0).status().code(), StatusCode::kInvalidArgument);
  auto huge = time_matmul(**device, MatMulShape{DType::kQ4_K, 1, 1 << 20, 1 << 20}, 1);
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("matmul timing: the weight"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace tessera::ops
