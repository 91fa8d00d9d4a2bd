// Gemma 4 through `tessera generate`: `ref` and `cpu` give the same greedy text, eagerly and, on cpu, with graph
// decoding, on synth files (--decisive: clear winners rather than the near ties of a deep random model's flat
// logits) of
//  - the dense E2B layout, 10 layers: sliding layers (head size 32) and full ones (64), KV-sharing layers of both
//    kinds and the double-wide MLP, per-layer embeddings and output scales;
//  - the MoE 26B-A4B layout, 12 layers: 8 KV heads in sliding layers and 1 in full ones whose V is their K, 8 GELU
//    experts (2 per token) beside the dense MLP, the router's own norm and the per-expert output scales.
// vulkan and opencl give ref's text too; a device without gemma4's operators refuses it by name. Parity with llama.cpp:
// tests/llamacpp/parity_test.cc
// (`gemma4_e2b`, `gemma4_26b_a4b`).
#include <gtest/gtest.h>

#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/refusing_device.h"

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

// vulkan and opencl run both layouts (vulkan's logits at every weight type: tests/engine/vulkan_families_test.cc,
// VulkanGemma4): the same greedy text as ref, eagerly and replaying a recorded decode step.
TEST(Gemma4, VulkanAndOpenClGreedyTextEqualsRefs) {
  const char* prompt = "Lily went to the park with her mom and she saw a big red ball near the tree";
  int tried = 0;
  for (const char* backend : {"vulkan", "opencl"}) {
    auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", backend,
                              "--max-tokens", "1", "--quiet"});
    if (probe.exit_code != 0) continue;  // the backend is not here
    ++tried;
    for (auto synth : {synth_e2b, synth_26b_a4b}) {
      const std::string model = synth("f16");  // after the scratch folder of the one before is gone
      SCOPED_TRACE(std::string(backend) + " " + model);
      const std::string ref = generate(model, "ref", prompt);
      EXPECT_GT(ref.size(), 16u);
      EXPECT_EQ(generate(model, backend, prompt), ref);
      EXPECT_EQ(generate(model, backend, prompt, {"--graph", "on"}), ref) << "graph decoding";
    }
  }
  if (tried == 0) GTEST_SKIP() << "neither vulkan nor opencl is here";
}

// A device without gemma4's operators refuses its files at load, naming what it lacks: `scale` for both layouts,
// the per-expert output scales (moe_route expert_scale) for the MoE one.
TEST(Gemma4, ADeviceWithoutItsOperatorsRefusesByName) {
  testing::RefusingDevice dev(std::move(ops::open_device("ref").value()), "bare", [](const ops::Op& op) {
    const auto* r = std::get_if<ops::MoeRouteOp>(&op);
    return std::holds_alternative<ops::ScaleOp>(op) || (r && r->expert_scale.valid()) ? std::string("no kernel")
                                                                                      : std::string();
  });
  for (auto synth : {synth_e2b, synth_26b_a4b}) {
    const std::string path = synth("f32");
    auto m = model::load_model(path, "", false);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto r = engine::ModelRunner::create(dev, m->config, m->weights, {});
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(r.status().message().find("the bare backend does not run this gemma4 model's"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("per-layer embeddings and output scales (scale)"), std::string::npos)
        << r.status().message();
    const bool moe = path.find("26b") != std::string::npos;
    EXPECT_EQ(r.status().message().find("per-expert output scales (moe_route expert_scale)") != std::string::npos, moe)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tessera
