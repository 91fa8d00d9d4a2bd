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
  for (const char* want :
       {"s (file read, weights uploaded", "prefill  tok/s median", "decode   tok/s median", "min", "max",
        "ceilings (1 threads): read", "FMA peak", "roofline decode", "roofline prefill", "weights q8_0"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in:\n" << r.out;
  }
}

// A backend whose buffers are not host memory (cuda, opencl, a discrete GPU under vulkan) is not held against the
// host's bandwidth and FMA peak: no fraction of a ceiling that does not bound it.
TEST(BenchGenerate, DeviceMemoryBackendsReportNoHostRoofline) {
  TS_REQUIRE_STORIES260K();
  // Skips only when opencl cannot run at all: a failure of the bench itself must fail the test.
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "opencl",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "opencl not available here: " << probe.err;
  auto r = run_process({tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--backend",
                        "opencl", "--prompt-tokens", "16", "--gen-tokens", "8", "--repeat", "1"},
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("decode   tok/s median"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ceilings: not measured (backend opencl"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("roofline"), std::string::npos) << r.out;
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
  EXPECT_NE(be.err.find("unknown backend 'tpu'; known: ref"), std::string::npos) << be.err;
  auto sub = run_process({tessera_bin(), "bench"});
  EXPECT_NE(sub.exit_code, 0);
}

// `tessera link bench` between two real processes, each endpoint beside its same-run ceiling.
TEST(LinkBench, ReportsEachSizeWithItsCeilingAndFraction) {
  for (const char* endpoint : {"shm", "tcp"}) {
    auto r = run_process({tessera_bin(), "link", "bench", "--endpoint", endpoint, "--sizes", "64K,1M", "--repeats", "2",
                          "--seconds", "0.05"},
                         120);
    ASSERT_EQ(r.exit_code, 0) << endpoint << ": " << r.err;
    EXPECT_NE(r.out.find(std::string("endpoint ") + endpoint), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# ceiling: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("     64K "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("      1M "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("%)\n"), std::string::npos) << "a fraction per size, with its spread: " << r.out;
  }
  auto bad = run_process({tessera_bin(), "link", "bench", "--endpoint", "tcp", "--sizes", "banana"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_FALSE(bad.err.empty());
}

}  // namespace
}  // namespace tessera
