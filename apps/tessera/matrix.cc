// `tessera matrix`: the support matrix (src/bench/support_matrix.h). Runs the conformance suite and the
// whole-model checks on every backend this binary has and writes docs/support-matrix.md and .json.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/support_matrix.h"
#include "commands.h"
#include "model_paths.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::cli {
namespace {

struct MatrixArgs {
  std::string out_dir = "docs";
  std::string model_dir;
  bool fast = false;
  int threads = 2;
  std::vector<std::string> only_ops;  // empty: every operator
  std::vector<std::string> families;  // empty: every family shape
  bool no_families = false;
};

int run_matrix(const MatrixArgs& a) {
  ops::register_builtin_backends();
  std::vector<bench::MatrixBackend> backends = bench::open_matrix_backends(a.threads);
  auto ref = ops::open_device("ref");
  if (!ref.ok()) return fail(ref.status().message());

  bench::SupportMatrix m;
  m.fast = a.fast;
  for (const bench::MatrixBackend& b : backends) m.backends.push_back(b.column);
  bench::ConformanceSelection selection{a.fast, a.only_ops,
                                        [](size_t n) { std::fprintf(stderr, "matrix: %zu cases\n", n); }};
  bench::run_conformance_matrix(**ref, backends, selection, m);

  auto bundled = default_model_dir();
  const std::string model_dir = !a.model_dir.empty() ? a.model_dir : bundled.ok() ? *bundled : "models/stories260K";
  bench::run_model_matrix(backends, model_dir, m);
  if (!a.no_families) {
    bench::run_family_matrix(backends, **ref, a.families.empty() ? bench::matrix_family_shapes() : a.families, m,
                             [](const std::string& s) { std::fprintf(stderr, "matrix: family %s\n", s.c_str()); });
  }

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.version = TESSERA_VERSION_STRING;
  m.date = date;
  m.machine = bench::machine_description();
  m.libraries = ops::cpu::runtime_versions();

  const std::string md = bench::matrix_markdown(m), js = bench::matrix_json(m);
  for (auto [name, text] : {std::pair{"support-matrix.md", &md}, std::pair{"support-matrix.json", &js}}) {
    const std::string path = a.out_dir + "/" + name;
    std::ofstream f(path);
    if (!f || !(f << *text)) return fail("cannot write " + path);
    std::fprintf(stderr, "matrix: wrote %s\n", path.c_str());
  }
  const int failures = m.failing_cells();
  std::printf("matrix: %zu cases, %d failing cells\n", m.cases_run, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

Action add_matrix_command(CLI::App& app) {
  auto args = std::make_shared<MatrixArgs>();
  CLI::App* cmd = app.add_subcommand(
      "matrix", "Run the conformance suite and whole-model checks on every backend; write the support matrix");
  cmd->add_option("--out-dir", args->out_dir, "Where support-matrix.md and .json go")->capture_default_str();
  cmd->add_option("--model-dir", args->model_dir, "stories260K directory (default: the shared models)");
  cmd->add_option("--threads", args->threads, "Host threads for backends that use them")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_flag("--fast", args->fast, "Skip the slow conformance cases");
  cmd->add_option("--op", args->only_ops, "Only these operators (repeatable; default: all)");
  cmd->add_option("--family", args->families, "Only these family shapes in the families section (repeatable)");
  cmd->add_flag("--no-families", args->no_families, "Skip the families section (one synth model per family)");
  return [args] { return run_matrix(*args); };
}

}  // namespace tessera::cli
