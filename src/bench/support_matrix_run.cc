// Filling the support matrix by running devices (support_matrix.h).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "bench/support_matrix.h"
#include "engine/generator.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::bench {

std::vector<MatrixBackend> open_matrix_backends(int threads) {
  std::vector<MatrixBackend> backends;
  auto add = [&](std::string name, Result<std::unique_ptr<ops::Device>> d) {
    MatrixBackend b;
    b.column.name = std::move(name);
    b.column.available = d.ok();
    if (d.ok()) {
      b.device = std::move(d).value();
      b.column.detail = b.device->info().name;
    } else {
      b.column.detail = d.status().message();
    }
    backends.push_back(std::move(b));
  };
  for (const std::string& name : ops::BackendRegistry::global().names()) {
    add(name, ops::open_device(name, 0, ops::DeviceOptions{threads, ""}));
  }
  // The cpu backend's other kernel variants this processor runs (the registry's "cpu" is the one auto picks).
  if (auto chosen = ops::cpu::create_backend(); chosen.ok()) {
    for (ops::cpu::Isa isa : ops::cpu::runnable_isas()) {
      auto be = ops::cpu::create_backend(isa);
      if (!be.ok()) continue;
      auto d = (*be)->open_device_with(0, ops::DeviceOptions{threads, ""});
      if (!d.ok() || ops::cpu::detected_isa().rfind(std::string(ops::cpu::isa_name(isa)), 0) == 0) continue;
      add(fmt::format("cpu({})", ops::cpu::isa_name(isa)), std::move(d));
    }
  }
  for (const char* known : {"ref", "cpu", "opencl", "vulkan", "cuda"}) {
    bool have = false;
    for (const MatrixBackend& b : backends) have = have || b.column.name == known;
    if (!have) backends.push_back({{known, false, "not compiled into this binary"}, nullptr});
  }
  return backends;
}

void run_conformance_matrix(ops::Device& reference, const std::vector<MatrixBackend>& backends,
                            const ConformanceSelection& selection, SupportMatrix& m) {
  std::vector<ops::Device*> targets;
  std::vector<size_t> target_index;
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i].device) {
      targets.push_back(backends[i].device.get());
      target_index.push_back(i);
    }
  }
  std::map<std::pair<std::string, std::string>, size_t> row_of;
  for (const ops::conformance::Case& c : ops::conformance::conformance_cases()) {
    if (selection.fast && c.slow) continue;
    const auto& only = selection.only_ops;
    if (!only.empty() && std::find(only.begin(), only.end(), c.op) == only.end()) continue;
    auto [it, inserted] = row_of.try_emplace({c.op, std::string(dtype_name(c.dtype))}, m.operators.size());
    if (inserted)
      m.operators.push_back({c.op, std::string(dtype_name(c.dtype)), std::vector<MatrixCell>(backends.size())});
    MatrixOpRow& row = m.operators[it->second];
    std::vector<ops::conformance::CaseResult> rs = ops::conformance::run_case(c, reference, targets);
    for (size_t t = 0; t < rs.size(); ++t) row.cells[target_index[t]].add(c.shape, rs[t]);
    if (++m.cases_run % 250 == 0 && selection.progress) selection.progress(m.cases_run);
  }
}

std::vector<std::string> matrix_model_dtypes() { return {"f32", "f16", "bf16", "q8_0", "q4_0"}; }

namespace {

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

// Every weight type of one backend: f32 against the reference text, the others against f32.
void check_backend(ops::Device& device, const model::LoadedModel& model, const std::string& want,
                   const std::vector<std::string>& dtypes, std::vector<std::vector<ModelCheck>>& rows, size_t b) {
  std::vector<std::string> f32_pieces;
  for (size_t d = 0; d < dtypes.size(); ++d) {
    std::vector<std::string> pieces;
    Status s = greedy(device, model, *parse_dtype(dtypes[d]), pieces);
    ModelCheck& mc = rows[d][b];
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
      const bool same = text + "\n" == want;
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

}  // namespace

void run_model_matrix(const std::vector<MatrixBackend>& backends, const std::string& model_dir, SupportMatrix& m) {
  m.model_dtypes = matrix_model_dtypes();
  m.models.assign(m.model_dtypes.size(), std::vector<ModelCheck>(backends.size()));
  auto model = model::load_model(model_dir);
  auto want = read_file(model_dir + "/greedy-256.txt");
  for (size_t b = 0; b < backends.size(); ++b) {
    if (!backends[b].device) {
      for (auto& row : m.models) row[b] = {"untested", backends[b].column.detail};
      continue;
    }
    if (!model.ok() || !want.ok()) {
      for (auto& row : m.models) row[b] = {"untested", "stories260K not found at " + model_dir};
      continue;
    }
    check_backend(*backends[b].device, *model, *want, m.model_dtypes, m.models, b);
  }
}

}  // namespace tessera::bench
