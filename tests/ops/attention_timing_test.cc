// The attention timing behind `tessera bench attention`: it times the decode operator over enough cache copies to
// read them from memory, counts the cache bytes an operator reads, and refuses shapes a KV cache cannot hold.
#include <gtest/gtest.h>

#include "ops/attention_timing.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

TEST(AttentionTiming, TimesEveryRunOverCopiesAndRefusesShapesACacheCannotHold) {
  register_builtin_backends();
  auto device = open_device("cpu", 0, DeviceOptions{1, ""});
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  // 2 sequences x 300 positions x 2 kv heads x 64, K and V, f16: 307200 bytes; 256 MiB of them is 874 copies.
  const AttentionShape shape{DType::kF16, 2, 4, 2, 64, 300};
  EXPECT_DOUBLE_EQ(AttentionTiming::cache_bytes(shape), 2.0 * 2 * 300 * 2 * 64 * 2);
  EXPECT_DOUBLE_EQ(AttentionTiming::cache_bytes(AttentionShape{DType::kQ8_0, 1, 1, 1, 32, 10}), 2.0 * 10 * 34);
  auto t = time_attention(**device, shape, 3);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->seconds.size(), 3u);
  EXPECT_EQ(t->copies, 874);
  EXPECT_GT(t->best(), 0.0);
  EXPECT_LE(t->best(), t->median());
  // Resident: one copy, read again each run.
  auto resident = time_attention(**device, shape, 2, true);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  EXPECT_EQ(resident->copies, 1);
  EXPECT_EQ(resident->seconds.size(), 2u);
  auto uneven = time_attention(**device, AttentionShape{DType::kF16, 1, 6, 4, 64, 16}, 1);
  EXPECT_EQ(uneven.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(uneven.status().message().find("6 heads do not share 4 kv heads"), std::string::npos)
      << uneven.status().message();
  auto blocks = time_attention(**device, AttentionShape{DType::kQ8_0, 1, 2, 1, 48, 16}, 1);
  EXPECT_EQ(blocks.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(blocks.status().message().find("32-element q8_0 blocks"), std::string::npos) << blocks.status().message();
  EXPECT_EQ(time_attention(**device, AttentionShape{DType::kQ4_K, 1, 2, 1, 256, 16}, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(time_attention(**device, shape, 0).status().code(), StatusCode::kInvalidArgument);
  // A cache the host could not fill is refused before anything is allocated.
  auto huge = time_attention(**device, AttentionShape{DType::kF16, 4096, 32, 8, 128, 1 << 20}, 1);
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("attention timing: the cache"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace tessera::ops
