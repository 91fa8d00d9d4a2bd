// GGUF files written by llama.cpp's own tools, read by Tessera (issue 27): its C++ converter from llama2.c
// checkpoints (llama-convert-llama2c-to-ggml) and its Python writer (gguf-py, driven by
// tests/model/gguf_py/write_llama2c.py the way convert_hf_to_gguf.py drives it). Both write "no such token" as -1
// in a uint32 (4294967295); the stories260K model they write must generate llama2.c's reference output
// (greedy-256.txt) byte for byte on cpu.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/mapped_file.h"
#include "llamacpp/peer.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

void expect_greedy_256(const std::string& gguf, std::vector<std::string> extra = {}) {
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  std::vector<std::string> argv{testing::tessera_bin(), "generate", "--model",      gguf,  "--backend", "cpu",
                                "--temperature",        "0",        "--max-tokens", "256", "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto g = run_process(argv, 120.0);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out, *want);
}

TEST(LlamaCppWriters, Llama2cConverterFileGivesTheReferenceText) {
  TS_REQUIRE_LLAMACPP();
  TS_REQUIRE_STORIES260K();
  const std::string tool = testing::llamacpp_bin_dir() + "/llama-convert-llama2c-to-ggml";
  ASSERT_TRUE(fs::exists(tool)) << tool << " is missing: scripts/llamacpp.sh builds it";
  const std::string out = testing::scratch_dir() + "/stories260K-llamacpp.gguf";
  auto c = run_process({tool, "--copy-vocab-from-model", testing::stories260k_dir() + "/tok512.bin", "--llama2c-model",
                        testing::stories260k_dir() + "/stories260K.bin", "--llama2c-output-model", out},
                       120.0);
  ASSERT_EQ(c.exit_code, 0) << testing::peer_failure(c) << ": " << c.err;
  // The converter writes the padding id as LLAMA_TOKEN_NULL; Tessera must read it as "none", not refuse the file.
  auto i = run_process({testing::tessera_bin(), "inspect", out}, 60.0);
  ASSERT_EQ(i.exit_code, 0) << i.err;
  // The converter records a context of 128 positions whatever the checkpoint says (stories260K was trained on 512);
  // as with llama.cpp's -c, the reference's 257 positions need a longer one asked for.
  EXPECT_NE(i.out.find("context:       128"), std::string::npos) << i.out;
  expect_greedy_256(out, {"--ctx-size", "512"});
}

TEST(LlamaCppWriters, GgufPyFileWithNoneTokenIdsGivesTheReferenceText) {
  TS_REQUIRE_LLAMACPP();
  TS_REQUIRE_STORIES260K();
  const fs::path gguf_py = fs::path(testing::llamacpp_bin_dir()) / ".." / ".." / "src" / "gguf-py";
  ASSERT_TRUE(fs::exists(gguf_py / "gguf" / "gguf_writer.py")) << "no gguf-py at " << gguf_py;
  // Debian's python3 with python3-numpy and python3-yaml (scripts/install-deps), whatever python3 PATH finds first.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string out = testing::scratch_dir() + "/stories260K-gguf-py.gguf";
  auto w =
      run_process({"/usr/bin/env", "PYTHONPATH=" + gguf_py.lexically_normal().string(), python,
                   testing::source_dir() + "/tests/model/gguf_py/write_llama2c.py",
                   testing::stories260k_dir() + "/stories260K.bin", testing::stories260k_dir() + "/tok512.bin", out},
                  120.0);
  ASSERT_EQ(w.exit_code, 0) << w.err << w.out;
  expect_greedy_256(out);
}

}  // namespace
}  // namespace tessera
