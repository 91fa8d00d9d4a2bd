// `tessera matrix` writes the support matrix with the fields and cells the issue asks for.
#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

TEST(Matrix, WritesMarkdownAndJsonWithCellsForEveryBackend) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir();
  auto r = run_process({tessera_bin(), "matrix", "--fast", "--op", "add", "--op", "softmax", "--family", "qwen3-0.6b",
                        "--family", "bge-small", "--out-dir", dir, "--model-dir", testing::stories260k_dir()},
                       240);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto md = read_file(dir + "/support-matrix.md");
  auto js = read_file(dir + "/support-matrix.json");
  ASSERT_TRUE(md.ok());
  ASSERT_TRUE(js.ok());
  for (const char* field : {"\"version\"", "\"date\"", "\"machine\"", "\"libraries\"", "\"operators\"", "\"models\""}) {
    EXPECT_NE(js->find(field), std::string::npos) << field;
  }
  EXPECT_NE(md->find("| add | f32 | tested: pass"), std::string::npos) << *md;
  EXPECT_EQ(md->find("| matmul |"), std::string::npos) << "--op limits the suite";
  // The whole-model rows: f32 byte for byte on ref and cpu; other dtypes say where they depart (or not).
  EXPECT_NE(md->find("| stories260K | f32 | tested: pass (greedy-256.txt byte for byte) | tested: pass "
                     "(greedy-256.txt byte for byte)"),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("| stories260K | q4_0 |"), std::string::npos);
  EXPECT_NE(md->find("untested"), std::string::npos) << "backends not built here are listed as untested";
  // The families section, limited by --family: a generating model's rows and an embedding model's.
  EXPECT_NE(md->find("| qwen3-0.6b | q4_k | tested: pass (logits nmse"), std::string::npos) << *md;
  EXPECT_NE(md->find("| bge-small | f16 | tested: pass (embedding nmse"), std::string::npos) << *md;
  EXPECT_EQ(md->find("| llama3.2-1b |"), std::string::npos) << "--family limits the section";
  EXPECT_NE(js->find("\"families\""), std::string::npos);
  EXPECT_EQ(md->find("tested: FAIL ("), std::string::npos) << *md;
}

}  // namespace
}  // namespace tessera
