// opencl on GGUF checkpoints stored in the K-quants (issue 19): a stories110M-shaped model (dim 768, hidden
// 2048: whole 256-element super-blocks) written by `tessera synth` in q4_k and in q6_k generates, loaded as
// stored, the same greedy tokens on opencl as on ref. Random weights make the text noise, which is what
// makes it a sharp check: any wrong nibble or scale changes the argmax within a few tokens.
#include <gtest/gtest.h>

#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

TEST(OpenClModels, KQuantGgufGreedyTextEqualsRef) {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "opencl",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "opencl not available here: " << probe.err;
  const std::string dir = testing::scratch_dir();
  for (const char* dtype : {"q4_k", "q6_k"}) {
    const std::string model = dir + "/s110m-" + dtype + ".gguf", tok = dir + "/tok.bin";
    auto synth = run_process({tessera_bin(), "synth", "--shape", "stories110M", "--format", "gguf", "--dtype", dtype,
                              "--layers", "1", "--out", model, "--tokenizer-out", tok});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    std::string text[2];
    const char* backends[2] = {"ref", "opencl"};
    for (int i = 0; i < 2; ++i) {
      auto r = run_process({tessera_bin(), "generate", "--model", model, "--tokenizer", tok, "--prompt",
                            "Once upon a time", "--max-tokens", "8", "--temperature", "0", "--no-echo", "--quiet",
                            "--backend", backends[i], "--threads", "2"},
                           240.0);
      ASSERT_EQ(r.exit_code, 0) << dtype << " " << backends[i] << ": " << r.err;
      text[i] = r.out;
    }
    EXPECT_GT(text[0].size(), 8u) << dtype;
    EXPECT_EQ(text[1], text[0]) << dtype;
  }
}

}  // namespace
}  // namespace tessera
