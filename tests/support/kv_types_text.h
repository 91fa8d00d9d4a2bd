// The KV cache types of llama.cpp's -ctk/-ctv (bf16, q8_0, q4_0) on a device backend, through the CLI: a small
// qwen3-shaped model (dim 256, 2 layers, f16) must give ref's 24 greedy tokens at every type, eagerly and replayed
// from graphs (`--graph on`); the types must also part from each other on this model, so the check would see a
// cache silently kept in another type. Used by the vulkan and opencl tests (each skips first without its device).
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "support/paths.h"
#include "support/process.h"

namespace tessera::testing {

inline void expect_every_kv_cache_type_gives_refs_text(const std::string& backend) {
  const std::string model = scratch_dir() + "/qwen3.gguf";
  auto synth = run_process({tessera_bin(),  "synth", "--shape",  "qwen3-0.6b", "--small",    "--dim",    "256",
                            "--hidden-dim", "512",   "--layers", "2",          "--decisive", "--format", "gguf",
                            "--dtype",      "f16",   "--seed",   "3",          "--out",      model});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  auto text = [&](const std::string& on, const char* kv, const char* graph) {
    auto r = run_process(
        {tessera_bin(), "generate", "--model", model, "--prompt", "Once upon a time there was a little", "--max-tokens",
         "24", "--temperature", "0", "--no-echo", "--quiet", "--backend", on, "--kv-dtype", kv, "--graph", graph},
        240);
    EXPECT_EQ(r.exit_code, 0) << on << " " << kv << ": " << r.err;
    return r.out;
  };
  std::set<std::string> distinct;
  for (const char* kv : {"bf16", "q8_0", "q4_0"}) {
    SCOPED_TRACE(kv);
    const std::string want = text("ref", kv, "off");
    EXPECT_GT(want.size(), 16u);
    distinct.insert(want);
    EXPECT_EQ(text(backend, kv, "off"), want);
    EXPECT_EQ(text(backend, kv, "on"), want) << "graph decoding";
  }
  EXPECT_GE(distinct.size(), 2u) << "the cache types should not all give the same text on this model";
}

}  // namespace tessera::testing
