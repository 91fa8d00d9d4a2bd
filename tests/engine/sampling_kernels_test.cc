// The sampler's row loops (engine/internal/sampling_kernels.h), each build against double-precision references
// written here: the plain loops everywhere, the AVX2 ones where this CPU has them.
#include "engine/internal/sampling_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"

namespace tessera::engine::internal {
namespace {

std::vector<HostVector> builds() {
  std::vector<HostVector> out = {HostVector::kScalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(HostVector::kAvx2);
  return out;
}
const char* name(HostVector v) { return v == HostVector::kAvx2 ? "avx2" : "scalar"; }

std::vector<float> noisy_row(size_t n, uint64_t seed, float spread) {
  Rng gen(seed);
  std::vector<float> x(n);
  for (float& v : x) v = (gen.next_f32() - 0.5f) * spread;
  return x;
}

TEST(SamplingKernels, SoftmaxMatchesDoublePrecision) {
  // Lengths around the eight-lane body and its tail; rows with -inf (masked tokens) and a far tail that
  // underflows to 0; scales of temperatures 0.5 to 2.
  for (HostVector v : builds()) {
    for (size_t n : {1u, 2u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 1000u, 262147u}) {
      for (float scale : {0.5f, 1.25f, 2.0f}) {
        std::vector<float> x = noisy_row(n, n, 40.0f);
        if (n > 3) x[n / 2] = -INFINITY;
        if (n > 5) x[n - 2] = -500.0f;
        double mx = -INFINITY, sum = 0.0;
        for (float e : x) mx = std::max(mx, static_cast<double>(e));
        std::vector<double> want(n);
        for (size_t i = 0; i < n; ++i) sum += want[i] = std::exp((static_cast<double>(x[i]) - mx) * scale);
        softmax(x, scale, v);
        double total = 0.0;
        for (size_t i = 0; i < n; ++i) {
          // (x - max) * scale = a is rounded to f32 twice first, so e^a carries about |a| * 1.2e-7 relative
          // error (the sum is kept in double).
          const double a = want[i] > 0 ? std::log(want[i]) : 0.0;
          const double bound = 2e-7 * (1.0 + std::abs(a));
          ASSERT_NEAR(x[i], want[i] / sum, bound * want[i] / sum + 1e-30)
              << name(v) << " n " << n << " scale " << scale << " i " << i;
          total += x[i];
        }
        EXPECT_NEAR(total, 1.0, 1e-5) << name(v) << " n " << n;
      }
    }
  }
}

TEST(SamplingKernels, FirstAboveFindsTheNextValueOverTheBar) {
  for (HostVector v : builds()) {
    std::vector<float> x(203, 0.5f);
    x[0] = 2.0f;
    x[8] = 1.0f;  // equal to the bar: not above it
    x[9] = 1.5f;
    x[150] = NAN;
    x[201] = 3.0f;
    EXPECT_EQ(first_above(x, 0, 1.0f, v), 0u) << name(v);
    EXPECT_EQ(first_above(x, 1, 1.0f, v), 9u) << name(v);
    EXPECT_EQ(first_above(x, 10, 1.0f, v), 201u) << name(v);  // NaN is not above anything
    EXPECT_EQ(first_above(x, 202, 1.0f, v), 203u) << name(v);
    EXPECT_EQ(first_above(x, 203, 1.0f, v), 203u) << name(v);
  }
}

TEST(SamplingKernels, MaxSkipsNaNAndSumExpMatchesDoublePrecision) {
  for (HostVector v : builds()) {
    for (size_t n : {1u, 9u, 24u, 128259u}) {
      std::vector<float> x = noisy_row(n, 3 * n, 30.0f);
      if (n > 1) x[0] = NAN;
      if (n > 8) x[n - 3] = 17.5f;
      double mx = -INFINITY;
      for (float e : x)
        if (!std::isnan(e)) mx = std::max(mx, static_cast<double>(e));
      const float got = max_value(x, v);
      if (n == 1) {
        EXPECT_EQ(got, x[0]) << name(v);
        continue;
      }
      EXPECT_EQ(got, static_cast<float>(mx)) << name(v) << " n " << n;
      x[0] = -INFINITY;
      double sum = 0.0;
      for (float e : x) sum += std::exp(static_cast<double>(e) - mx);
      EXPECT_NEAR(sum_exp(x, got, v), sum, 1e-6 * sum) << name(v) << " n " << n;
    }
    const std::vector<float> none = {NAN, NAN, NAN};
    EXPECT_EQ(max_value(none, v), -INFINITY) << name(v);
  }
}

}  // namespace
}  // namespace tessera::engine::internal
