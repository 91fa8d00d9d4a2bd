// Gemma 4 through `tessera generate`: `ref` and `cpu` give the same greedy text, eagerly and, on cpu, with graph
// decoding, on synth files (--decisive: clear winners rather than the near ties of a deep random model's flat
// logits) of
//  - the dense E2B layout, 10 layers: sliding layers (head size 32) and full ones (64), KV-sharing layers of both
//    kinds and the double-wide MLP, per-layer embeddings and output scales;
//  - the MoE 26B-A4B layout, 12 layers: 8 KV heads in sliding layers and 1 in full ones whose V is their K, 8 GELU
//    experts (2 per token) beside the dense MLP, the router's own norm and the per-expert output scales.
// vulkan gives ref's text too; opencl, without gemma4's operators, refuses it by name. Parity with llama.cpp:
// tests/llamacpp/parity_test.cc
// (`gemma4_e2b`, `gemma4_26b_a4b`).
#include <gtest/gtest.h>

#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

std::string synth_e2b(const std::string& dtype) {
  const std::string model = testing::scratch_dir() + "/gemma4-e2b-" + dtype + ".gguf";
  auto w = run_process({tessera_bin(), "synth",        "--shape", "gemma4-e2b", "--small", "--dim",
                        "256",         "--hidden-dim", "512",     "--layers",   "10",      "--rare-byte-tokens",
                        "--decisive",  "--format",     "gguf",    "--dtype",    dtype,     "--seed",
                        "7",           "--out",        model},
                       300.0);
  EXPECT_EQ(w.exit_code, 0) << w.err;
  return model;
}

std::string synth_26b_a4b(const std::string& dtype) {
  const std::string model = testing::scratch_dir() + "/gemma4-26b-a4b-" + dtype + ".gguf";
  auto w = run_process({tessera_bin(), "synth",        "--shape", "gemma4-26b-a4b", "--small", "--dim",
                        "256",         "--hidden-dim", "512",     "--layers",       "12",      "--rare-byte-tokens",
                        "--decisive",  "--format",     "gguf",    "--dtype",        dtype,     "--seed",
                        "7",           "--out",        model},
                       300.0);
  EXPECT_EQ(w.exit_code, 0) << w.err;
  return model;
}

std::string generate(const std::string& model, const std::string& backend, const std::string& prompt,
                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {tessera_bin(),  "generate", "--model",       model, "--prompt",  prompt,
                                   "--max-tokens", "32",       "--temperature", "0",   "--no-echo", "--quiet",
                                   "--backend",    backend,    "--threads",     "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run_process(argv, 240.0);
  EXPECT_EQ(r.exit_code, 0) << backend << ": " << r.err;
  return r.out;
}

TEST(Gemma4, DenseGreedyTextEqualsBetweenRefAndCpu) {
  // Prompts longer than the window of 8, so that sliding layers drop positions full layers keep.
  const char* prompts[] = {"Lily went to the park with her mom and she saw a big red ball near the tree",
                           "Once upon a time, there was"};
  for (const char* dtype : {"f32", "f16"}) {
    SCOPED_TRACE(dtype);
    const std::string model = synth_e2b(dtype);
    for (const char* prompt : prompts) {
      const std::string ref = generate(model, "ref", prompt);
      EXPECT_GT(ref.size(), 16u) << prompt;
      EXPECT_EQ(generate(model, "cpu", prompt), ref) << prompt;
      EXPECT_EQ(generate(model, "cpu", prompt, {"--graph", "on"}), ref) << "graph decoding: " << prompt;
    }
  }
}

TEST(Gemma4, MoeGreedyTextEqualsBetweenRefAndCpu) {
  const char* prompts[] = {"Lily went to the park with her mom and she saw a big red ball near the tree",
                           "Once upon a time, there was"};
  for (const char* dtype : {"f32", "f16"}) {
    SCOPED_TRACE(dtype);
    const std::string model = synth_26b_a4b(dtype);
    for (const char* prompt : prompts) {
      const std::string ref = generate(model, "ref", prompt);
      EXPECT_GT(ref.size(), 16u) << prompt;
      EXPECT_EQ(generate(model, "cpu", prompt), ref) << prompt;
      EXPECT_EQ(generate(model, "cpu", prompt, {"--graph", "on"}), ref) << "graph decoding: " << prompt;
    }
  }
}

// vulkan runs both layouts (its logits at every weight type: tests/engine/vulkan_families_test.cc, VulkanGemma4):
// the same greedy text as ref, eagerly and replaying a recorded decode step.
TEST(Gemma4, VulkanGreedyTextEqualsRefs) {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "vulkan",
                            "--max-tokens", "1", "--quiet"});
  if (probe.exit_code != 0) GTEST_SKIP() << "no vulkan device here: " << probe.err;
  const char* prompt = "Lily went to the park with her mom and she saw a big red ball near the tree";
  for (auto synth : {synth_e2b, synth_26b_a4b}) {
    const std::string model = synth("f16");  // after the scratch folder of the one before is gone
    SCOPED_TRACE(model);
    const std::string ref = generate(model, "ref", prompt);
    EXPECT_GT(ref.size(), 16u);
    EXPECT_EQ(generate(model, "vulkan", prompt), ref);
    EXPECT_EQ(generate(model, "vulkan", prompt, {"--graph", "on"}), ref) << "graph decoding";
  }
}

// opencl runs experts but not gemma4's per-expert output scales (nor its scale operator): it names what it lacks.
TEST(Gemma4, MoeBackendsWithoutItsOperatorsRefuseByName) {
  const std::string model = synth_26b_a4b("f32");
  int tried = 0;
  for (const char* backend : {"opencl"}) {
    auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", backend,
                              "--max-tokens", "1", "--quiet"});
    if (probe.exit_code != 0) continue;  // the backend is not here
    ++tried;
    auto r = run_process({tessera_bin(), "generate", "--model", model, "--backend", backend, "--prompt", "hi",
                          "--max-tokens", "2", "--quiet"},
                         240.0);
    EXPECT_NE(r.exit_code, 0) << backend;
    const std::string want = "per-expert output scales (moe_route expert_scale)";
    EXPECT_NE(r.err.find("gemma4 model's"), std::string::npos) << backend << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << backend << ": " << r.err;
  }
  if (tried == 0) GTEST_SKIP() << "no opencl device here";
}

TEST(Gemma4, BackendsWithoutItsOperatorsRefuseByName) {
  const std::string model = synth_e2b("f32");
  for (const char* backend : {"opencl"}) {
    auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", backend,
                              "--max-tokens", "1", "--quiet"});
    if (probe.exit_code != 0) continue;  // the backend is not here
    auto r = run_process({tessera_bin(), "generate", "--model", model, "--backend", backend, "--prompt", "hi",
                          "--max-tokens", "2", "--quiet"},
                         240.0);
    EXPECT_NE(r.exit_code, 0) << backend;
    EXPECT_NE(r.err.find("gemma4 model's per-layer embeddings and output scales (scale)"), std::string::npos)
        << backend << ": " << r.err;
  }
}

}  // namespace
}  // namespace tessera
