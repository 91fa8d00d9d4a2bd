// The support matrix behind `tessera matrix`: the conformance suite run on every backend this binary has
// (and why the others are untested), then the whole-model checks (stories260K greedy on each backend and
// weight dtype), written as docs/support-matrix.md and docs/support-matrix.json.
//
// Cells: `tested: pass` (every case of the cell passed; shapes a backend declines are counted beside),
// `tested: FAIL`, `unsupported` (the backend declines every case of the cell), `untested` (the backend is
// not available here, with the reason).
//
// Two halves: SupportMatrix is plain data, and matrix_markdown() / matrix_json() render it (pure, the same
// bytes for the same data); open_matrix_backends(), run_conformance_matrix() and run_model_matrix() fill it
// by running devices. Everything here runs on the calling thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"
#include "ops/conformance/conformance.h"

namespace tessera::bench {

// Every case of one operator and dtype on one backend, aggregated.
struct MatrixCell {
  int pass = 0, fail = 0, unsupported = 0;
  std::string first_problem;  // the first failing case ("shape: detail"), else the first reason declined

  void add(const std::string& shape, const ops::conformance::CaseResult& result);
  std::string text() const;  // tested: FAIL / tested: pass / unsupported
  std::string note() const;  // counts, and the first problem
};

// One backend column. `detail` is the device's name when available, else why it is untested.
struct MatrixColumn {
  std::string name;
  bool available = false;
  std::string detail;
};

struct MatrixOpRow {
  std::string op, dtype;
  std::vector<MatrixCell> cells;  // one per column
};

// One whole-model cell: tested: pass / tested: FAIL / unsupported / untested, and what was seen.
struct ModelCheck {
  std::string cell;
  std::string note;
};

// One family's synth model in one weight type, on every backend (run_family_matrix).
struct FamilyRow {
  std::string shape, dtype;
  std::vector<ModelCheck> cells;  // one per column
};

struct SupportMatrix {
  std::string version, date, machine, libraries;  // the header lines
  bool fast = false;                              // slow conformance cases skipped
  size_t cases_run = 0;
  std::vector<MatrixColumn> backends;
  std::vector<MatrixOpRow> operators;           // in the suite's order
  std::vector<std::string> model_dtypes;        // the weight types of the model rows
  std::vector<std::vector<ModelCheck>> models;  // [dtype][backend]
  std::vector<FamilyRow> families;              // [shape x dtype]

  // Operator cells with a failing case plus model cells that failed.
  int failing_cells() const;
};

std::string matrix_markdown(const SupportMatrix& m);
// One object per line inside each array, every string escaped by nlohmann::json.
std::string matrix_json(const SupportMatrix& m);

// "CPU model, N logical CPUs, kernels ISA" of this machine.
std::string machine_description();

// A backend the matrix runs on: its column and its device (null when untested).
struct MatrixBackend {
  MatrixColumn column;
  std::unique_ptr<ops::Device> device;
};

// Every registered backend, the cpu backend's other kernel variants this processor runs ("cpu(avx2)"...),
// and the known backends not compiled in (untested). Call ops::register_builtin_backends() first.
std::vector<MatrixBackend> open_matrix_backends(int threads);

struct ConformanceSelection {
  bool fast = false;                               // skip the slow cases
  std::vector<std::string> only_ops;               // empty: every operator
  std::function<void(size_t cases_run)> progress;  // called every 250 cases (may be empty)
};

// Runs the selected conformance cases on every available backend against `reference` and fills
// `m.operators` (cells of unavailable backends stay empty) and `m.cases_run`.
void run_conformance_matrix(ops::Device& reference, const std::vector<MatrixBackend>& backends,
                            const ConformanceSelection& selection, SupportMatrix& m);

// The weight types of the model rows, in order (f32 first: the others compare with it).
std::vector<std::string> matrix_model_dtypes();

// stories260K from `model_dir`, greedy 256 tokens on every available backend in each weight type: f32 must
// reproduce `model_dir`/greedy-256.txt byte for byte; the others report where they depart from f32. Fills
// `m.model_dtypes` and `m.models`.
void run_model_matrix(const std::vector<MatrixBackend>& backends, const std::string& model_dir, SupportMatrix& m);

// One synth shape per architecture family, and the weight types of the family rows (those of llama.cpp's F16, Q8_0
// and Q4_K_M files).
std::vector<std::string> matrix_family_shapes();
std::vector<std::string> matrix_family_dtypes();

// Each shape at test size (2 layers, rows of 256, seeded, clear winners) written as GGUF in each family weight
// type and run on every available backend: the prompt's logits against `reference`'s (normalised error within
// 1e-6 for f16, 1e-2 for the block types, else FAIL; a block type beyond 1e-2 whose 16 greedy tokens all equal
// ref's passes with a note: an 8-bit activation tipped a near tie such as an expert choice) and where 16 greedy tokens
// depart from its. A backend that refuses the model at load is `unsupported` (its reason), one without a device
// `untested` ("not run here (no device)"). Appends to `m.families`; `progress` (may be empty) hears each shape as it
// starts. The embedding shapes (bge-small, qwen3-embedding-0.6b) compare their pooled prompt with ref's instead (same
// bounds).
void run_family_matrix(const std::vector<MatrixBackend>& backends, ops::Device& reference,
                       const std::vector<std::string>& shapes, SupportMatrix& m,
                       const std::function<void(const std::string&)>& progress);

}  // namespace tessera::bench
