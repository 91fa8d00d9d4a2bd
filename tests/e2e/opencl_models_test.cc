// opencl on GGUF checkpoints stored in the K-quants (issue 19): a stories110M-shaped model (dim 768, hidden
// 2048: whole 256-element super-blocks) written by `tessera synth` in q4_k and in q6_k generates, loaded as
// stored, the same greedy tokens on opencl as on ref. Random weights make the text noise, which is what
// makes it a sharp check: any wrong nibble or scale changes the argmax within a few tokens.
#include <gtest/gtest.h>

#include "support/kv_types_text.h"
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

// Qwen3.5 (qwen35 and qwen35moe: gated delta-net linear attention with its recurrent state, gated attention with
// partial rotary, and the MoE variant's experts with a sigmoid-gated shared expert) on opencl, loaded as stored at
// f32, q8_0 and q4_k: the greedy text of ref, and at f32 of cpu too (cpu's quantised kernels round their
// activations to 8 bits: its text departs from ref's on this model at q8_0, as docs/support-matrix.md says). The dense
// variant's random-weight text settles into a loop within a few tokens, the MoE variant's does not; both are checked
// logit for logit against ref in HybridEngine.ChunksTokensAndBatchesCarryTheState (model_formats_test).
TEST(OpenClModels, Qwen35GreedyTextEqualsRefAndCpu) {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "opencl",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "opencl not available here: " << probe.err;
  const std::string dir = testing::scratch_dir();
  const char* prompts[] = {"Lily went to the park with her mom and she saw", "Once upon a time, there was"};
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    for (const char* dtype : {"f32", "q8_0", "q4_k"}) {
      SCOPED_TRACE(std::string(shape) + " " + dtype);
      const std::string model = dir + "/" + shape + "-" + dtype + ".gguf";
      auto synth = run_process({tessera_bin(), "synth",        "--shape", shape,      "--small", "--dim",
                                "256",         "--hidden-dim", "512",     "--layers", "3",       "--rare-byte-tokens",
                                "--format",    "gguf",         "--dtype", dtype,      "--seed",  "7",
                                "--out",       model});
      ASSERT_EQ(synth.exit_code, 0) << synth.err;
      std::vector<std::string> backends = {"ref", "opencl"};
      if (std::string(dtype) == "f32") backends.push_back("cpu");
      for (const char* prompt : prompts) {
        std::vector<std::string> text;
        for (const std::string& backend : backends) {
          auto r = run_process({tessera_bin(), "generate", "--model", model, "--prompt", prompt, "--max-tokens", "32",
                                "--temperature", "0", "--no-echo", "--quiet", "--backend", backend, "--threads", "2"},
                               240.0);
          ASSERT_EQ(r.exit_code, 0) << backend << ": " << r.err;
          text.push_back(r.out);
        }
        EXPECT_GT(text[0].size(), 16u) << prompt;
        for (size_t i = 1; i < text.size(); ++i) EXPECT_EQ(text[i], text[0]) << backends[i] << ": " << prompt;
      }
    }
  }
}

// The runner widens weights a device cannot run to f32 (model_runner.cc), which would make the text checks
// above and the quantised PD pairs pass without a single quantised kernel: the bytes each decoded token reads
// (`bench generate`, from the weights as uploaded) show that opencl keeps them in their block format, as ref
// does, and reads far less than the f32 model.
double mb_per_token(const std::vector<std::string>& model_args, const std::string& backend, const std::string& wdt) {
  std::vector<std::string> argv = {tessera_bin(), "bench", "generate"};
  argv.insert(argv.end(), model_args.begin(), model_args.end());
  argv.insert(argv.end(), {"--backend", backend, "--prompt-tokens", "4", "--gen-tokens", "2", "--repeat", "1",
                           "--no-ceilings", "--threads", "2"});
  if (!wdt.empty()) argv.insert(argv.end(), {"--weight-dtype", wdt});
  auto r = run_process(argv, 240.0);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find(" MB read/token");
  if (at == std::string::npos) return -1;
  const size_t open = r.out.rfind('(', at);
  return std::stod(r.out.substr(open + 1, at - open - 1));
}

TEST(OpenClModels, QuantisedWeightsStayQuantisedOnTheDevice) {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "opencl",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "opencl not available here: " << probe.err;
  const std::vector<std::string> s260k = {"--model", testing::stories260k_dir()};
  const double f32 = mb_per_token(s260k, "opencl", "");
  for (const char* w : {"q8_0", "q4_0"}) {
    const double cl = mb_per_token(s260k, "opencl", w);
    EXPECT_EQ(cl, mb_per_token(s260k, "ref", w)) << w;
    EXPECT_LT(cl, 0.5 * f32) << w;
  }
  const std::string dir = testing::scratch_dir();
  for (const char* w : {"q4_k", "q6_k"}) {
    const std::string model = dir + "/s110m-" + w + ".gguf", tok = dir + "/tok.bin";
    auto synth = run_process({tessera_bin(), "synth", "--shape", "stories110M", "--format", "gguf", "--dtype", w,
                              "--layers", "1", "--out", model, "--tokenizer-out", tok});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const std::vector<std::string> m = {"--model", model, "--tokenizer", tok};
    const double cl = mb_per_token(m, "opencl", "");
    EXPECT_EQ(cl, mb_per_token(m, "ref", "")) << w;
    // The synthetic file keeps its tied 32000 x 768 embedding / classifier in f32 (98.3 MB); widened, the
    // layer's 7.08M weights would add 28.3 MB, in q4_k 4.0 MB and in q6_k 5.8 MB.
    EXPECT_LT(cl, (4.0 * 32000 * 768 + 0.5 * 4 * 7.08e6) / 1e6) << w;
  }
}

// The KV cache types of llama.cpp's -ctk/-ctv on opencl: kv_write quantises as base/quant does and attention widens
// as ref does, so every type gives ref's greedy text, eagerly and replayed (support/kv_types_text.h).
TEST(OpenClModels, EveryKvCacheTypeGivesRefsText) {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "opencl",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "opencl not available here: " << probe.err;
  testing::expect_every_kv_cache_type_gives_refs_text("opencl");
}

}  // namespace
}  // namespace tessera
