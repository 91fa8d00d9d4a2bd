#include "base/status.h"

#include <gtest/gtest.h>

#include "base/dtype.h"
#include "base/rng.h"

namespace tessera {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd");
  return x / 2;
}

Result<int> quarter(int x) {
  TS_ASSIGN_OR_RETURN(int h, half(x));
  TS_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  TS_RETURN_IF_ERROR(half(x).status());
  return ok_status();
}

TEST(Status, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  EXPECT_EQ(ok_status().to_string(), "OK");
  Status s = not_found("no such file: x.bin");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: no such file: x.bin");
  EXPECT_EQ(s.with_context("loading").message(), "loading: no such file: x.bin");
  EXPECT_TRUE(ok_status().with_context("ignored").ok());
}

TEST(Status, EveryCodeHasAName) {
  EXPECT_EQ(status_code_name(StatusCode::kInvalidArgument), "InvalidArgument");
  EXPECT_EQ(status_code_name(StatusCode::kResourceExhausted), "ResourceExhausted");
  EXPECT_EQ(status_code_name(StatusCode::kUnavailable), "Unavailable");
  EXPECT_EQ(status_code_name(StatusCode::kDeadlineExceeded), "DeadlineExceeded");
  EXPECT_EQ(status_code_name(StatusCode::kUnimplemented), "Unimplemented");
  EXPECT_EQ(status_code_name(StatusCode::kInternal), "Internal");
}

TEST(Result, PropagatesThroughMacros) {
  EXPECT_EQ(*quarter(12), 3);
  Result<int> r = quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_EQ(check_even(5).code(), StatusCode::kInvalidArgument);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  EXPECT_DEATH({ (void)half(3).value(); }, "value\\(\\) of an error Result");
}

TEST(DType, SizesFollowGgufBlockLayouts) {
  EXPECT_EQ(dtype_bytes(DType::kF32, 10), 40u);
  EXPECT_EQ(dtype_bytes(DType::kF16, 10), 20u);
  EXPECT_EQ(dtype_bytes(DType::kQ8_0, 64), 68u);  // 2 blocks of (f16 scale + 32 int8)
  EXPECT_EQ(dtype_bytes(DType::kQ4_0, 64), 36u);  // 2 blocks of (f16 scale + 16 bytes of nibbles)
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_FALSE(parse_dtype("f64").has_value());
}

TEST(Rng, MatchesLlama2cXorshift) {
  // run.c: state ^= state >> 12; state ^= state << 25; state ^= state >> 27; (state * 0x2545F4914F6CDD1D) >> 32
  uint64_t state = 42;
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  auto expected = static_cast<uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
  Rng rng(42);
  EXPECT_EQ(rng.next_u32(), expected);
  Rng a(7), b(7);
  for (int i = 0; i < 100; ++i) {
    float f = a.next_f32();
    EXPECT_EQ(f, b.next_f32());
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
}

}  // namespace
}  // namespace tessera
