// The cuda backend on a machine with an NVIDIA GPU (label `gpu`): every fast conformance case against ref,
// and stories260K's greedy text byte for byte. Without the backend or a device the tests skip and say why.
#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "ops/conformance/conformance.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::ops {
namespace {

#define TS_REQUIRE_CUDA(dev)      \
  auto dev = open_device("cuda"); \
  if (!dev.ok()) GTEST_SKIP() << "no CUDA backend or device on this machine: " << dev.status().message()

TEST(Cuda, FastConformanceCasesMatchTheReference) {
  TS_REQUIRE_CUDA(dev);
  auto ref = open_device("ref");
  ASSERT_TRUE(ref.ok());
  int pass = 0, unsupported = 0;
  for (const conformance::Case& c : conformance::conformance_cases()) {
    if (c.slow) continue;
    conformance::CaseResult r = conformance::run_case(c, **ref, {dev->get()})[0];
    EXPECT_NE(r.outcome, conformance::Outcome::kFail)
        << c.op << " " << dtype_name(c.dtype) << " " << c.shape << ": " << r.detail;
    pass += r.outcome == conformance::Outcome::kPass;
    unsupported += r.outcome == conformance::Outcome::kUnsupported;
  }
  std::printf("[ cuda ] %d pass, %d unsupported\n", pass, unsupported);
}

TEST(Cuda, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_CUDA(dev);
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  auto r = testing::run_process({testing::tessera_bin(), "generate", "--model", testing::stories260k_dir(),
                                 "--temperature", "0", "--max-tokens", "256", "--backend", "cuda", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, *want);
}

}  // namespace
}  // namespace tessera::ops
