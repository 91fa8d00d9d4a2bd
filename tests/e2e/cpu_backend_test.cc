// The cpu backend as a user reaches it: `tessera generate --backend cpu`, checked against llama2.c's
// published greedy output, with its options and their bad values.
#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

TEST(CpuBackend, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  for (const char* threads : {"1", "2"}) {
    auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                          "--max-tokens", "256", "--backend", "cpu", "--threads", threads});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, *want) << "threads " << threads;
    EXPECT_NE(r.err.find("on cpu"), std::string::npos) << r.err;
  }
}

TEST(CpuBackend, QuantisedWeightsAndF16CacheGenerateText) {
  TS_REQUIRE_STORIES260K();
  for (const char* dtype : {"f16", "bf16", "q8_0", "q4_0"}) {
    auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                          "--max-tokens", "32", "--backend", "cpu", "--weight-dtype", dtype, "--kv-dtype", "f16",
                          "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << dtype << ": " << r.err;
    EXPECT_GT(r.out.size(), 20u) << dtype;
  }
}

TEST(CpuBackend, BadOptionsAreErrorsThatSayWhatIsAllowed) {
  TS_REQUIRE_STORIES260K();
  auto dtype = run_process(
      {tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "cpu", "--weight-dtype", "q2_k"});
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_NE(dtype.err.find("q4_0"), std::string::npos) << dtype.err;
  auto threads = run_process(
      {tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "cpu", "--threads", "-3"});
  EXPECT_NE(threads.exit_code, 0);
  auto backend = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "tpu"});
  EXPECT_NE(backend.exit_code, 0);
  EXPECT_NE(backend.err.find("cpu"), std::string::npos) << backend.err;
  EXPECT_NE(backend.err.find("ref"), std::string::npos) << backend.err;
}

}  // namespace
}  // namespace tessera
