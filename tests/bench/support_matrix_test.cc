// The support matrix (src/bench/support_matrix.h): cells aggregate cases as documented, the renderings carry
// every cell (the JSON parses back to the same strings, whatever they hold), and a run on `ref` fills it.
#include "bench/support_matrix.h"

#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "ops/conformance/conformance.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::bench {
namespace {

using ops::conformance::CaseResult;
using ops::conformance::Outcome;

TEST(MatrixCell, PassCountsCasesAndNamesDeclinedShapes) {
  MatrixCell c;
  EXPECT_EQ(c.text(), "unsupported");
  c.add("n=4", CaseResult{Outcome::kUnsupported, 0, "f16 not supported"});
  EXPECT_EQ(c.text(), "unsupported");
  EXPECT_EQ(c.note(), "f16 not supported");
  c.add("n=8", CaseResult{Outcome::kPass, 0, ""});
  c.add("n=16", CaseResult{Outcome::kPass, 0, ""});
  EXPECT_EQ(c.text(), "tested: pass");
  EXPECT_EQ(c.note(), "2 cases pass, 1 shapes unsupported");
}

TEST(MatrixCell, AFailureWinsAndKeepsTheFirstFailingShape) {
  MatrixCell c;
  c.add("n=4", CaseResult{Outcome::kPass, 0, ""});
  c.add("n=8", CaseResult{Outcome::kFail, 1, "nmse 1 > 1e-6"});
  c.add("n=16", CaseResult{Outcome::kFail, 2, "guard bytes overwritten"});
  c.add("n=32", CaseResult{Outcome::kUnsupported, 0, "too big"});
  EXPECT_EQ(c.text(), "tested: FAIL");
  EXPECT_EQ(c.note(), "2 of 4 cases fail; first: n=8: nmse 1 > 1e-6");
}

SupportMatrix small_matrix() {
  SupportMatrix m;
  m.version = "9.9.9";
  m.date = "2026-01-02T03:04:05Z";
  m.machine = "Test CPU \"quoted\", 2 logical CPUs";
  m.libraries = "OpenMP 201511";
  m.cases_run = 3;
  m.backends = {{"ref", true, "reference"}, {"cuda", false, "not compiled into this binary"}};
  MatrixOpRow add{"add", "f32", std::vector<MatrixCell>(2)};
  add.cells[0].add("n=4", CaseResult{Outcome::kPass, 0, ""});
  add.cells[0].add("n=8", CaseResult{Outcome::kFail, 1, "path C:\\x\nsecond line\ttab"});
  m.operators = {add};
  m.model_dtypes = {"f32"};
  m.models = {{{"tested: pass", "greedy-256.txt byte for byte"}, {"untested", "not compiled into this binary"}}};
  return m;
}

TEST(SupportMatrix, MarkdownHasOneColumnPerBackendAndOneRowPerCell) {
  const std::string md = matrix_markdown(small_matrix());
  EXPECT_NE(md.find("- version: tessera 9.9.9\n- date: 2026-01-02T03:04:05Z\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- backend `ref`: reference\n- backend `cuda`: untested: not compiled into this binary\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| operator | dtype | ref | cuda |\n|---|---|---|---|\n| add | f32 | tested: FAIL (1 of 2 cases "
                    "fail; first: n=8: path C:\\x"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| stories260K | f32 | tested: pass (greedy-256.txt byte for byte) | untested (not compiled "
                    "into this binary) |\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("--fast"), std::string::npos);
  SupportMatrix fast = small_matrix();
  fast.fast = true;
  EXPECT_NE(matrix_markdown(fast).find("- conformance cases run: 3 (slow cases skipped)\n"), std::string::npos);
  EXPECT_EQ(small_matrix().failing_cells(), 1);
}

TEST(SupportMatrix, JsonParsesBackToEveryCellOneObjectPerLine) {
  const SupportMatrix m = small_matrix();
  const std::string js = matrix_json(m);
  nlohmann::json j = nlohmann::json::parse(js);  // throws (fails the test) if the escaping is wrong
  EXPECT_EQ(j["version"], "9.9.9");
  EXPECT_EQ(j["machine"], m.machine);
  EXPECT_EQ(j["cases_run"], 3);
  ASSERT_EQ(j["backends"].size(), 2u);
  EXPECT_EQ(j["backends"][1]["available"], false);
  ASSERT_EQ(j["operators"].size(), 2u);  // one per operator row and backend
  EXPECT_EQ(j["operators"][0]["cell"], "tested: FAIL");
  EXPECT_EQ(j["operators"][0]["note"], m.operators[0].cells[0].note());  // backslash, newline and tab survive
  EXPECT_EQ(j["operators"][0]["pass"], 1);
  EXPECT_EQ(j["operators"][1]["cell"], "untested");
  EXPECT_EQ(j["operators"][1]["note"], "not compiled into this binary");
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_EQ(j["models"][0]["weights"], "f32");
  EXPECT_EQ(j["models"][0]["check"], "greedy-256");
  // Layout: the top level one member a line, each array element one line (diffs of the file stay readable).
  EXPECT_EQ(js.rfind("{\n  \"version\": \"9.9.9\",\n  \"date\": ", 0), 0u) << js;
  EXPECT_NE(js.find("\n    {\"name\": \"ref\", \"available\": true, \"detail\": \"reference\"},\n"), std::string::npos)
      << js;
  EXPECT_NE(js.find("\"models\": [\n    {\"model\": \"stories260K\", \"check\": \"greedy-256\", \"weights\": \"f32\""),
            std::string::npos)
      << js;
  std::istringstream lines(js);
  int n = 0;
  for (std::string line; std::getline(lines, line);) ++n;
  EXPECT_EQ(n, 1 + 5 + 3 * 2 + 2 + 2 + 2 + 1) << js;  // {, 5 scalars, 3 arrays' [ and ], their 6 rows, }
}

TEST(SupportMatrix, ConformanceOnRefAgainstRefPassesEveryCell) {
  ops::register_builtin_backends();
  auto ref = ops::open_device("ref");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  std::vector<MatrixBackend> backends(2);
  backends[0].column = {"ref", true, "reference"};
  backends[0].device = std::move(ops::open_device("ref")).value();
  backends[1].column = {"cuda", false, "not compiled into this binary"};
  SupportMatrix m;
  size_t progress_calls = 0;
  run_conformance_matrix(**ref, backends, {true, {"add", "softmax"}, [&](size_t) { ++progress_calls; }}, m);
  size_t expected = 0;
  for (const auto& c : ops::conformance::conformance_cases())
    expected += !c.slow && (c.op == "add" || c.op == "softmax");
  EXPECT_EQ(m.cases_run, expected);
  EXPECT_EQ(progress_calls, expected / 250);
  ASSERT_FALSE(m.operators.empty());
  int cases = 0;
  for (const MatrixOpRow& row : m.operators) {
    EXPECT_TRUE(row.op == "add" || row.op == "softmax") << row.op;
    ASSERT_EQ(row.cells.size(), 2u);
    EXPECT_EQ(row.cells[0].text(), "tested: pass") << row.op << " " << row.cells[0].note();
    EXPECT_EQ(row.cells[1].pass + row.cells[1].fail + row.cells[1].unsupported, 0);  // no device, no cases
    cases += row.cells[0].pass + row.cells[0].unsupported;
  }
  EXPECT_EQ(static_cast<size_t>(cases), expected);
}

TEST(SupportMatrix, ModelRowsOnRefReproduceTheReferenceText) {
  TS_REQUIRE_STORIES260K();
  ops::register_builtin_backends();
  std::vector<MatrixBackend> backends(2);
  backends[0].column = {"ref", true, "reference"};
  backends[0].device = std::move(ops::open_device("ref")).value();
  backends[1].column = {"cuda", false, "not compiled into this binary"};
  SupportMatrix m;
  run_model_matrix(backends, testing::stories260k_dir(), m);
  ASSERT_EQ(m.model_dtypes, matrix_model_dtypes());
  ASSERT_EQ(m.models.size(), m.model_dtypes.size());
  EXPECT_EQ(m.models[0][0].cell, "tested: pass");
  EXPECT_EQ(m.models[0][0].note, "greedy-256.txt byte for byte");
  for (size_t d = 1; d < m.models.size(); ++d) {
    EXPECT_EQ(m.models[d][0].cell, "tested: pass") << m.model_dtypes[d] << ": " << m.models[d][0].note;
    EXPECT_EQ(m.models[d][1].cell, "untested");
    EXPECT_EQ(m.models[d][1].note, "not compiled into this binary");
  }

  SupportMatrix missing;
  run_model_matrix(backends, "/nonexistent/stories", missing);
  EXPECT_EQ(missing.models[0][0].cell, "untested");
  EXPECT_EQ(missing.models[0][0].note, "stories260K not found at /nonexistent/stories");
}

// The families section: each shape in each family weight type on every column, against ref; a column without a
// device is "not run here (no device)"; both renderings carry the rows, and a failing cell counts.
TEST(SupportMatrix, FamilyRowsCompareEveryBackendWithRef) {
  ops::register_builtin_backends();
  auto ref = ops::open_device("ref");
  ASSERT_TRUE(ref.ok());
  std::vector<MatrixBackend> backends(2);
  backends[0].column = {"cpu", true, "host"};
  backends[0].device = std::move(ops::open_device("cpu", 0, ops::DeviceOptions{2, ""})).value();
  backends[1].column = {"cuda", false, "not compiled into this binary"};
  SupportMatrix m;
  m.backends = {backends[0].column, backends[1].column};
  std::vector<std::string> seen;
  run_family_matrix(backends, **ref, {"qwen3-0.6b", "gemma4-e2b"}, m, [&](const std::string& s) { seen.push_back(s); });
  EXPECT_EQ(seen, (std::vector<std::string>{"qwen3-0.6b", "gemma4-e2b"}));
  ASSERT_EQ(m.families.size(), 2 * matrix_family_dtypes().size());
  for (const FamilyRow& row : m.families) {
    SCOPED_TRACE(row.shape + " " + row.dtype);
    EXPECT_EQ(row.cells[0].cell, "tested: pass") << row.cells[0].note;
    EXPECT_NE(row.cells[0].note.find("logits nmse"), std::string::npos) << row.cells[0].note;
    EXPECT_EQ(row.cells[1].cell, "untested");
    EXPECT_EQ(row.cells[1].note, "not run here (no device): not compiled into this binary");
  }
  EXPECT_EQ(m.families[0].dtype, "f16");
  EXPECT_NE(m.families[0].cells[0].note.find("ref's 16 greedy tokens"), std::string::npos)
      << m.families[0].cells[0].note;
  EXPECT_EQ(m.failing_cells(), 0);
  const std::string md = matrix_markdown(m);
  EXPECT_NE(md.find("## Families x backends x weights"), std::string::npos);
  EXPECT_NE(md.find("| gemma4-e2b | q4_k | tested: pass"), std::string::npos) << md;
  const auto doc = nlohmann::json::parse(matrix_json(m));
  EXPECT_EQ(doc["families"].size(), m.families.size() * 2);
  m.families[1].cells[0].cell = "tested: FAIL";
  EXPECT_EQ(m.failing_cells(), 1);
}

}  // namespace
}  // namespace tessera::bench
