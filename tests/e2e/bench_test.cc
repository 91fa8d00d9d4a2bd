// `tessera bench generate` prints the figures docs/benchmarks.md quotes, and refuses impossible runs.
#include <gtest/gtest.h>

#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

TEST(BenchGenerate, ReportsSpeedCeilingsAndRooflineFractions) {
  TS_REQUIRE_STORIES260K();
  auto r = run_process(
      {tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--backend", "cpu", "--threads", "1",
       "--prompt-tokens", "16", "--gen-tokens", "8", "--repeat", "2", "--weight-dtype", "q8_0"},
      180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"prefill  tok/s median", "decode   tok/s median", "min", "max", "ceilings (1 threads): read",
                           "FMA peak", "roofline decode", "roofline prefill", "weights q8_0"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in:\n" << r.out;
  }
}

TEST(BenchGenerate, RunsLongerThanTheContextOrOnAMissingBackendAreErrors) {
  TS_REQUIRE_STORIES260K();
  auto ctx = run_process({tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--prompt-tokens",
                          "500", "--gen-tokens", "100", "--no-ceilings"});
  EXPECT_EQ(ctx.exit_code, 1);
  EXPECT_NE(ctx.err.find("exceeds the model's context"), std::string::npos) << ctx.err;
  auto be = run_process(
      {tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--backend", "tpu", "--no-ceilings"});
  EXPECT_EQ(be.exit_code, 1);
  EXPECT_NE(be.err.find("available backends"), std::string::npos) << be.err;
  auto sub = run_process({tessera_bin(), "bench"});
  EXPECT_NE(sub.exit_code, 0);
}

}  // namespace
}  // namespace tessera
