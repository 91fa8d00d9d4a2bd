// The attention timing behind `tessera bench attention`: it times the decode operator over enough cache copies to
// read them from memory, or a prefill chunk, counts the cache bytes and multiply-adds of a run, and refuses shapes a
// KV cache cannot hold.
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

TEST(AttentionTiming, TimesAPrefillChunkAndCountsItsMultiplyAdds) {
  register_builtin_backends();
  auto device = open_device("cpu", 0, DeviceOptions{1, ""});
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  // Decode: every head reads every position, 2 x head_dim multiply-adds each.
  EXPECT_DOUBLE_EQ(AttentionTiming::multiply_adds(AttentionShape{DType::kF16, 2, 4, 2, 64, 300}),
                   2.0 * 2 * 4 * 300 * 64);
  // The last 3 of 10 positions: they see 8, 9 and 10.
  EXPECT_DOUBLE_EQ(AttentionTiming::multiply_adds(AttentionShape{DType::kF16, 1, 4, 2, 64, 10, 3}),
                   2.0 * 4 * (8 + 9 + 10) * 64);
  // Two sequences of 300 positions, the last 40 new (past one 256-key block), resident and copied.
  const AttentionShape chunk{DType::kF16, 2, 4, 2, 64, 300, 40};
  for (bool resident : {true, false}) {
    auto t = time_attention(**device, chunk, 2, resident);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->seconds.size(), 2u);
    EXPECT_GT(t->best(), 0.0);
  }
  for (int32_t queries : {0, 301}) {
    AttentionShape bad = chunk;
    bad.queries = queries;
    auto t = time_attention(**device, bad, 1);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("do not fit a context of 300"), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace tessera::ops
