// `tessera matrix`: the support matrix. Runs the conformance suite on every backend this binary has (and
// says why the others are untested), then the whole-model checks (stories260K greedy on each backend and
// weight dtype), and writes docs/support-matrix.md and docs/support-matrix.json.
//
// Cells: `tested: pass` (every case of the cell passed; shapes a backend declines are counted beside),
// `tested: FAIL`, `unsupported` (the backend declines every case of the cell), `untested` (the backend is
// not available here, with the reason).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "engine/generator.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "model_paths.h"
#include "ops/conformance/conformance.h"
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
};

struct Cell {
  int pass = 0, fail = 0, unsupported = 0;
  std::string first_problem;
  std::string text() const {
    if (fail > 0) return "tested: FAIL";
    if (pass > 0) return "tested: pass";
    return "unsupported";
  }
  std::string note() const {
    if (fail > 0) return fmt::format("{} of {} cases fail; first: {}", fail, pass + fail + unsupported, first_problem);
    if (pass > 0 && unsupported > 0) return fmt::format("{} cases pass, {} shapes unsupported", pass, unsupported);
    if (pass > 0) return fmt::format("{} cases", pass);
    return first_problem;
  }
};

struct Backend {
  std::string name;
  std::unique_ptr<ops::Device> device;  // null: untested
  std::string why_untested;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(ch));
    } else {
      out += ch;
    }
  }
  return out;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

struct ModelCheck {
  std::string cell;  // tested: pass / tested: FAIL / unsupported
  std::string note;
};

// Greedy 256 tokens of stories260K; pieces receives one text piece per generated token.
Status greedy(ops::Device& device, const model::LoadedModel& m, std::optional<DType> dtype,
              std::vector<std::string>& pieces) {
  engine::RunnerOptions ro;
  ro.max_batch_tokens = 64;
  ro.weight_dtype = dtype;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelRunner> runner,
                      engine::ModelRunner::create(device, m.config, m.weights, ro));
  engine::GenerateOptions go;
  go.max_tokens = 256;
  go.sampling.temperature = 0.0f;
  auto stats = engine::generate(*runner, *m.tokenizer, "", go, [&](std::string_view p) { pieces.emplace_back(p); });
  return stats.status();
}

int run_matrix(const MatrixArgs& a) {
  ops::register_builtin_backends();
  std::vector<Backend> backends;
  for (const std::string& name : ops::BackendRegistry::global().names()) {
    auto d = ops::open_device(name, 0, ops::DeviceOptions{a.threads, ""});
    backends.push_back({name, d.ok() ? std::move(d).value() : nullptr, d.ok() ? "" : d.status().message()});
  }
  // The cpu backend's other kernel variants this processor runs (the registry's "cpu" is the one auto picks).
  if (auto chosen = ops::cpu::create_backend(); chosen.ok()) {
    for (ops::cpu::Isa isa : ops::cpu::runnable_isas()) {
      auto be = ops::cpu::create_backend(isa);
      if (!be.ok()) continue;
      auto d = (*be)->open_device_with(0, ops::DeviceOptions{a.threads, ""});
      if (!d.ok() || ops::cpu::detected_isa().rfind(std::string(ops::cpu::isa_name(isa)), 0) == 0) continue;
      backends.push_back({fmt::format("cpu({})", ops::cpu::isa_name(isa)), std::move(d).value(), ""});
    }
  }
  for (const char* known : {"ref", "cpu", "opencl", "vulkan", "cuda"}) {
    bool have = false;
    for (const Backend& b : backends) have = have || b.name == known;
    if (!have) backends.push_back({known, nullptr, "not compiled into this binary"});
  }
  auto ref = ops::open_device("ref");
  if (!ref.ok()) return fail(ref.status().message());
  std::vector<ops::Device*> targets;
  std::vector<size_t> target_index;
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i].device) {
      targets.push_back(backends[i].device.get());
      target_index.push_back(i);
    }
  }

  // Operators x dtypes x backends.
  std::map<std::pair<std::string, std::string>, std::vector<Cell>> cells;
  std::vector<std::pair<std::string, std::string>> order;
  size_t ran = 0;
  for (const ops::conformance::Case& c : ops::conformance::conformance_cases()) {
    if (a.fast && c.slow) continue;
    if (!a.only_ops.empty() && std::find(a.only_ops.begin(), a.only_ops.end(), c.op) == a.only_ops.end()) continue;
    auto key = std::make_pair(c.op, std::string(dtype_name(c.dtype)));
    auto [it, inserted] = cells.try_emplace(key, std::vector<Cell>(backends.size()));
    if (inserted) order.push_back(key);
    std::vector<ops::conformance::CaseResult> rs = ops::conformance::run_case(c, **ref, targets);
    for (size_t t = 0; t < rs.size(); ++t) {
      Cell& cell = it->second[target_index[t]];
      const std::string where = c.shape + ": " + rs[t].detail;
      switch (rs[t].outcome) {
        case ops::conformance::Outcome::kPass:
          ++cell.pass;
          break;
        case ops::conformance::Outcome::kFail:
          if (cell.fail++ == 0) cell.first_problem = where;
          break;
        case ops::conformance::Outcome::kUnsupported:
          if (cell.unsupported++ == 0 && cell.first_problem.empty()) cell.first_problem = rs[t].detail;
          break;
      }
    }
    if (++ran % 250 == 0) std::fprintf(stderr, "matrix: %zu cases\n", ran);
  }

  // Models x backends.
  auto bundled = default_model_dir();
  const std::string model_dir = !a.model_dir.empty() ? a.model_dir : bundled.ok() ? *bundled : "models/stories260K";
  const char* kModelDtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
  std::vector<std::vector<ModelCheck>> model_rows(std::size(kModelDtypes), std::vector<ModelCheck>(backends.size()));
  auto model = model::load_model(model_dir);
  auto want = read_file(model_dir + "/greedy-256.txt");
  for (size_t b = 0; b < backends.size(); ++b) {
    if (!backends[b].device) {
      for (auto& row : model_rows) row[b] = {"untested", backends[b].why_untested};
      continue;
    }
    if (!model.ok() || !want.ok()) {
      for (auto& row : model_rows) row[b] = {"untested", "stories260K not found at " + model_dir};
      continue;
    }
    std::vector<std::string> f32_pieces;
    for (size_t d = 0; d < std::size(kModelDtypes); ++d) {
      std::vector<std::string> pieces;
      const DType dtype = *parse_dtype(kModelDtypes[d]);
      Status s = greedy(*backends[b].device, *model, dtype, pieces);
      ModelCheck& mc = model_rows[d][b];
      if (s.code() == StatusCode::kUnimplemented) {
        mc = {"unsupported", s.message()};
        continue;
      }
      if (!s.ok()) {
        mc = {"tested: FAIL", s.message()};
        continue;
      }
      std::string text;
      for (const std::string& p : pieces) text += p;
      if (d == 0) {
        f32_pieces = pieces;
        const bool same = text + "\n" == *want;
        mc = {same ? "tested: pass" : "tested: FAIL",
              same ? "greedy-256.txt byte for byte" : "differs from greedy-256.txt"};
        continue;
      }
      size_t first = 0;
      while (first < pieces.size() && first < f32_pieces.size() && pieces[first] == f32_pieces[first]) ++first;
      mc = {"tested: pass", first == pieces.size() && first == f32_pieces.size()
                                ? fmt::format("same {} tokens as f32", first)
                                : fmt::format("departs from f32 at generated token {}", first)};
    }
  }

  // Write.
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string machine = fmt::format("{}, {} logical CPUs, kernels {}", cpu_model(),
                                          std::thread::hardware_concurrency(), ops::cpu::detected_isa());
  const std::string libs = ops::cpu::runtime_versions();

  std::string md = "# Support matrix\n\nGenerated by `tessera matrix";
  md += a.fast ? " --fast" : "";
  md += fmt::format("` (do not edit by hand).\n\n- version: tessera {}\n- date: {}\n- machine: {}\n- libraries: {}\n",
                    TESSERA_VERSION_STRING, date, machine, libs);
  md += fmt::format("- conformance cases run: {}{}\n", ran, a.fast ? " (slow cases skipped)" : "");
  for (const Backend& b : backends) {
    md += fmt::format("- backend `{}`: {}\n", b.name, b.device ? b.device->info().name : "untested: " + b.why_untested);
  }
  md +=
      "\nCells: `tested: pass`, `tested: FAIL`, `unsupported`, `untested`. Each operator cell aggregates every "
      "shape case of that operator and dtype against `ref` (normalised-error bound, NaN/Inf agreement, guard "
      "bytes).\n\n## Operators x backends x dtypes\n\n| operator | dtype |";
  for (const Backend& b : backends) md += " " + b.name + " |";
  md += "\n|---|---|";
  for (size_t i = 0; i < backends.size(); ++i) md += "---|";
  md += "\n";
  for (const auto& key : order) {
    md += fmt::format("| {} | {} |", key.first, key.second);
    for (size_t b = 0; b < backends.size(); ++b) {
      const Cell& c = cells[key][b];
      md += backends[b].device ? fmt::format(" {} ({}) |", c.text(), c.note()) : " untested |";
    }
    md += "\n";
  }
  md +=
      "\n## Models x backends\n\nstories260K, greedy, 256 tokens. f32 must reproduce llama2.c's `greedy-256.txt` "
      "byte for byte; other weight types are converted at load and report where their greedy text first "
      "departs from the same backend's f32 run.\n\n| model | weights |";
  for (const Backend& b : backends) md += " " + b.name + " |";
  md += "\n|---|---|";
  for (size_t i = 0; i < backends.size(); ++i) md += "---|";
  md += "\n";
  for (size_t d = 0; d < std::size(kModelDtypes); ++d) {
    md += fmt::format("| stories260K | {} |", kModelDtypes[d]);
    for (size_t b = 0; b < backends.size(); ++b) {
      md += fmt::format(" {} ({}) |", model_rows[d][b].cell, model_rows[d][b].note);
    }
    md += "\n";
  }

  std::string js = fmt::format(
      "{{\n  \"version\": \"{}\",\n  \"date\": \"{}\",\n  \"machine\": \"{}\",\n  \"libraries\": \"{}\",\n"
      "  \"cases_run\": {},\n  \"backends\": [",
      TESSERA_VERSION_STRING, date, json_escape(machine), json_escape(libs), ran);
  for (size_t b = 0; b < backends.size(); ++b) {
    js += fmt::format("{}\n    {{\"name\": \"{}\", \"available\": {}, \"detail\": \"{}\"}}", b ? "," : "",
                      backends[b].name, backends[b].device ? "true" : "false",
                      json_escape(backends[b].device ? backends[b].device->info().name : backends[b].why_untested));
  }
  js += "\n  ],\n  \"operators\": [";
  bool first = true;
  for (const auto& key : order) {
    for (size_t b = 0; b < backends.size(); ++b) {
      const Cell& c = cells[key][b];
      js += fmt::format(
          "{}\n    {{\"op\": \"{}\", \"dtype\": \"{}\", \"backend\": \"{}\", \"cell\": \"{}\", \"pass\": {}, "
          "\"fail\": {}, \"unsupported\": {}, \"note\": \"{}\"}}",
          first ? "" : ",", key.first, key.second, backends[b].name, backends[b].device ? c.text() : "untested", c.pass,
          c.fail, c.unsupported, json_escape(backends[b].device ? c.note() : backends[b].why_untested));
      first = false;
    }
  }
  js += "\n  ],\n  \"models\": [";
  first = true;
  for (size_t d = 0; d < std::size(kModelDtypes); ++d) {
    for (size_t b = 0; b < backends.size(); ++b) {
      js += fmt::format(
          "{}\n    {{\"model\": \"stories260K\", \"check\": \"greedy-256\", \"weights\": \"{}\", \"backend\": "
          "\"{}\", \"cell\": \"{}\", \"note\": \"{}\"}}",
          first ? "" : ",", kModelDtypes[d], backends[b].name, model_rows[d][b].cell,
          json_escape(model_rows[d][b].note));
      first = false;
    }
  }
  js += "\n  ]\n}\n";

  for (auto [name, text] : {std::pair{"support-matrix.md", &md}, std::pair{"support-matrix.json", &js}}) {
    const std::string path = a.out_dir + "/" + name;
    std::ofstream f(path);
    if (!f || !(f << *text)) return fail("cannot write " + path);
    std::fprintf(stderr, "matrix: wrote %s\n", path.c_str());
  }
  int failures = 0;
  for (const auto& [key, row] : cells) {
    for (const Cell& c : row) failures += c.fail > 0;
  }
  for (const auto& row : model_rows) {
    for (const ModelCheck& m : row) failures += m.cell == "tested: FAIL";
  }
  std::printf("matrix: %zu cases, %d failing cells\n", ran, failures);
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
  return [args] { return run_matrix(*args); };
}

}  // namespace tessera::cli
