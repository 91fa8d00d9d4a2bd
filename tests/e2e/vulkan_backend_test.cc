// The vulkan backend as a user reaches it: `tessera generate --backend vulkan` gives llama2.c's published
// greedy text for stories260K (f32 and f16 caches, eagerly and replaying recorded command buffers, in the
// stored weight types too), `tessera inspect --devices` lists the device, and without a device the error says
// why. On lavapipe (Mesa's software Vulkan) in CI.
#include <gtest/gtest.h>

#include <cctype>
#include <csignal>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "http/http.h"
#include "support/kv_types_text.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

// The reason vulkan cannot run here, or "" when it can.
std::string unavailable() {
  auto probe = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "vulkan",
                            "--max-tokens", "1", "--quiet"});
  return probe.exit_code == 0 ? "" : probe.err;
}

TEST(VulkanBackend, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_STORIES260K();
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  for (const char* kv : {"f32", "f16"}) {
    for (const char* graph : {"off", "on"}) {
      auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                            "--max-tokens", "256", "--backend", "vulkan", "--kv-dtype", kv, "--graph", graph},
                           180);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, *want) << "kv " << kv << " graph " << graph;
      EXPECT_NE(r.err.find("on vulkan"), std::string::npos) << r.err;
    }
  }
}

// Weights stored in other types generate the same text on vulkan as on ref (vulkan widens them exactly as
// ref does), and stay in their type on the device: the bytes a token reads are ref's, not the f32 model's.
TEST(VulkanBackend, StoredWeightTypesGiveRefsTextAndStayQuantised) {
  TS_REQUIRE_STORIES260K();
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  auto text = [](const char* backend, const char* dtype) {
    auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                          "--max-tokens", "64", "--backend", backend, "--weight-dtype", dtype, "--quiet"},
                         180);
    EXPECT_EQ(r.exit_code, 0) << backend << " " << dtype << ": " << r.err;
    return r.out;
  };
  auto mb = [](const char* backend, const char* dtype) {
    auto r = run_process(
        {tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--backend", backend,
         "--prompt-tokens", "4", "--gen-tokens", "2", "--repeat", "1", "--no-ceilings", "--weight-dtype", dtype},
        180);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find(" MB read/token");
    if (at == std::string::npos) return -1.0;
    const size_t open = r.out.rfind('(', at);
    return std::stod(r.out.substr(open + 1, at - open - 1));
  };
  const double f32 = mb("vulkan", "f32");
  for (const char* dtype : {"f16", "bf16", "q8_0", "q4_0"}) {
    const std::string got = text("vulkan", dtype);
    EXPECT_GT(got.size(), 20u) << dtype;
    EXPECT_EQ(got, text("ref", dtype)) << dtype;
    const double v = mb("vulkan", dtype);
    EXPECT_EQ(v, mb("ref", dtype)) << dtype;
    EXPECT_LT(v, 0.6 * f32) << dtype;
  }
}

// Mixture-of-experts families (qwen3moe: 8 experts, 2 per token; mixtral; gpt-oss with its sinks, clamped SwiGLU,
// expert biases and MXFP4 experts) as `tessera synth` writes them, rows 256 wide so that q4_k fills every matrix:
// vulkan's greedy text is ref's, eagerly and replaying recorded steps, and cpu's at f16 (cpu's quantised kernels
// round activations to 8 bits, so at q8_0 / q4_k / mxfp4 its text may part from ref's on these random models: seen
// for mixtral q8_0, qwen3moe q4_k, gpt-oss q8_0 and mxfp4). The expert stacks stay in their stored type on the
// device: a token reads ref's bytes, not a widened model's.
TEST(VulkanBackend, MoeFamiliesGiveRefsTextAndKeepExpertsQuantised) {
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  const std::string dir = testing::scratch_dir();
  auto generate = [](const std::string& model, const std::string& backend, const char* graph) {
    auto r = run_process(
        {tessera_bin(), "generate", "--model", model, "--prompt", "Once upon a time, there was", "--max-tokens", "32",
         "--temperature", "0", "--no-echo", "--quiet", "--backend", backend, "--threads", "2", "--graph", graph},
        240);
    EXPECT_EQ(r.exit_code, 0) << backend << ": " << r.err;
    return r.out;
  };
  auto mb = [](const std::string& model, const std::string& backend) {
    auto r = run_process({tessera_bin(), "bench", "generate", "--model", model, "--backend", backend, "--prompt-tokens",
                          "4", "--gen-tokens", "2", "--repeat", "1", "--no-ceilings"},
                         240);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find(" MB read/token");
    if (at == std::string::npos) return -1.0;
    const size_t open = r.out.rfind('(', at);
    return std::stod(r.out.substr(open + 1, at - open - 1));
  };
  for (const char* shape : {"qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b"}) {
    double f16_mb = 0;
    const bool oss = std::string(shape) == "gpt-oss-20b";
    for (const char* dtype : {"f16", "q8_0", oss ? "mxfp4" : "q4_k"}) {
      SCOPED_TRACE(std::string(shape) + " " + dtype);
      const std::string model = dir + "/" + shape + "-" + dtype + ".gguf";
      auto synth = run_process({tessera_bin(), "synth",        "--shape", shape,      "--small", "--dim",
                                "256",         "--hidden-dim", "512",     "--layers", "3",       "--rare-byte-tokens",
                                "--format",    "gguf",         "--dtype", dtype,      "--seed",  "7",
                                "--out",       model});
      ASSERT_EQ(synth.exit_code, 0) << synth.err;
      const std::string want = generate(model, "ref", "off");
      EXPECT_GT(want.size(), 16u);
      EXPECT_EQ(generate(model, "vulkan", "off"), want);
      EXPECT_EQ(generate(model, "vulkan", "on"), want);
      if (std::string(dtype) == "f16") {
        EXPECT_EQ(generate(model, "cpu", "off"), want);
      }
      const double v = mb(model, "vulkan");
      EXPECT_EQ(v, mb(model, "ref"));
      if (std::string(dtype) == "f16") f16_mb = v;
      if (std::string(dtype) == "q4_k" || std::string(dtype) == "mxfp4") {
        EXPECT_LT(v, 0.5 * f16_mb);
      }
    }
  }
}

// Qwen3.5 (qwen35 and qwen35moe: gated delta-net linear attention carrying its convolution window and recurrent
// state across prefill and decode, gated attention with partial rotary, the MoE variant's sigmoid-gated shared
// expert) as `tessera synth` writes them: vulkan's greedy text is ref's at f32, q8_0 and q4_k, and cpu's at f32. The
// dense variant's random-weight text settles into a loop within a few tokens; both are checked logit for logit
// against ref in vulkan_families_test.
TEST(VulkanBackend, Qwen35GreedyTextEqualsRefAndCpu) {
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  const std::string dir = testing::scratch_dir();
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    for (const char* dtype : {"f32", "q8_0", "q4_k"}) {
      SCOPED_TRACE(std::string(shape) + " " + dtype);
      const std::string model = dir + "/" + shape + "-" + dtype + ".gguf";
      auto synth = run_process({tessera_bin(), "synth",        "--shape", shape,      "--small", "--dim",
                                "256",         "--hidden-dim", "512",     "--layers", "3",       "--rare-byte-tokens",
                                "--format",    "gguf",         "--dtype", dtype,      "--seed",  "7",
                                "--out",       model});
      ASSERT_EQ(synth.exit_code, 0) << synth.err;
      std::vector<std::string> backends = {"ref", "vulkan"};
      if (std::string(dtype) == "f32") backends.push_back("cpu");
      std::vector<std::string> text;
      for (const std::string& backend : backends) {
        auto r = run_process({tessera_bin(), "generate", "--model", model, "--prompt",
                              "Lily went to the park with her mom and she saw", "--max-tokens", "32", "--temperature",
                              "0", "--no-echo", "--quiet", "--backend", backend, "--threads", "2"},
                             240);
        ASSERT_EQ(r.exit_code, 0) << backend << ": " << r.err;
        text.push_back(r.out);
      }
      EXPECT_GT(text[0].size(), 16u);
      for (size_t i = 1; i < text.size(); ++i) EXPECT_EQ(text[i], text[0]) << backends[i];
    }
  }
}

// The KV cache types of llama.cpp's -ctk/-ctv: vulkan quantises as base/quant does (kv_write.comp, bit for bit in
// the conformance suite) and widens as ref does, so every type gives ref's greedy text, eagerly and replayed
// (support/kv_types_text.h).
TEST(VulkanBackend, EveryKvCacheTypeGivesRefsText) {
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  testing::expect_every_kv_cache_type_gives_refs_text("vulkan");
}

TEST(VulkanBackend, InspectDevicesListsTheVulkanDevice) {
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  auto r = run_process({tessera_bin(), "inspect", "--devices"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vulkan device 0: "), std::string::npos) << r.out;
  for (const char* key : {"apiVersion", "memoryHeaps[0]", "subgroupSize", "maxStorageBufferRange"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  EXPECT_NE(r.out.find("cpu device 0: "), std::string::npos) << r.out;
  auto none = run_process({tessera_bin(), "inspect"}, 30);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--devices"), std::string::npos) << none.err;
}

// deploy/local-vulkan.yaml: `tessera up` starts prefill on cpu and decode on vulkan behind the router; a
// prompt long enough to be disaggregated is prefilled on cpu, its KV moved to the vulkan node, and the text is
// single-node generation's.
TEST(VulkanBackend, UpSpecPutsDecodeOnVulkanAndServesTheSingleNodeText) {
  TS_REQUIRE_STORIES260K();
  if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << "vulkan not available here: " << why;
  testing::BackgroundProcess up(
      {tessera_bin(), "up", testing::source_dir() + "/deploy/local-vulkan.yaml", "--port", "0"});
  const std::string ready = up.wait_for_line("cluster ready", 120);
  ASSERT_FALSE(ready.empty()) << "tessera up did not come up";
  const size_t at = ready.find("http://"), v1 = ready.find("/v1", at);
  const std::string router = ready.substr(at, v1 - at);
  std::string logs = ready.substr(ready.find("logs in ") + 8);
  logs = logs.substr(0, logs.find(')'));
  auto token = read_file(logs + "/cluster-token");
  ASSERT_TRUE(token.ok());
  while (!token->empty() && std::isspace(static_cast<unsigned char>(token->back()))) token->pop_back();
  // The decode node, from the router's registry; it says which backend it runs.
  auto nodes = http::fetch({.url = router + "/admin/nodes", .headers = {{"x-tessera-cluster-token", *token}}});
  ASSERT_TRUE(nodes.ok()) << nodes.status().to_string();
  ASSERT_EQ(nodes->status, 200) << nodes->body;
  std::string decode;
  const nlohmann::json registry = nlohmann::json::parse(nodes->body);
  for (const auto& n : registry["nodes"]) {
    if (n["role"] == "decode") decode = n["url"].get<std::string>();
  }
  ASSERT_FALSE(decode.empty()) << nodes->body;
  auto health = http::fetch({.url = decode + "/health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(nlohmann::json::parse(health->body)["backend"], "vulkan") << health->body;
  const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play";
  auto single = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--prompt", prompt,
                             "--max-tokens", "40", "--temperature", "0", "--no-echo", "--quiet", "--backend", "ref"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(testing::complete_greedy(router, prompt, 40) + "\n", single.out);
  EXPECT_EQ(testing::scrape_metric(decode, "tessera_pd_requests_total{path=\"remote\"}"), 1.0);
  EXPECT_GT(testing::scrape_metric(decode, "tessera_pd_kv_bytes_total"), 0.0);
  EXPECT_EQ(up.stop(SIGTERM, 30), 0);
}

// Without a driver the loader lists no device: the backend says so and how to get one, instead of crashing.
TEST(VulkanBackend, NoDeviceIsAClearError) {
  TS_REQUIRE_STORIES260K();
  auto r = run_process(
      {"/usr/bin/env", "VK_ICD_FILENAMES=/nonexistent.json", "VK_DRIVER_FILES=/nonexistent.json", tessera_bin(),
       "generate", "--model", testing::stories260k_dir(), "--backend", "vulkan", "--max-tokens", "4"},
      60);
  EXPECT_NE(r.exit_code, 0);
  const bool not_built = r.err.find("unknown backend 'vulkan'") != std::string::npos;
  EXPECT_TRUE(not_built || r.err.find("vulkan:") != std::string::npos) << r.err;
  if (!not_built) {
    EXPECT_NE(r.err.find("mesa-vulkan-drivers"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace tessera
