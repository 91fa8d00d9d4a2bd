// The conformance suite: every operator x dtype x shape case, run on a backend and on `ref`, compared.
//
// In the manner of llama.cpp's test-backend-ops. A case builds one operator with seeded random inputs on a
// device; the harness builds it on the reference device and on each device under test from the same seed,
// runs both, and compares every output:
//   - the normalised mean squared error sum((x - ref)^2) / sum(ref^2) must stay under the operator's bound
//     (0 for operators that only move bytes, and for integer outputs);
//   - NaN and +-Inf must appear at the same places with the same signs;
//   - guard bytes written before and after every output must be untouched (no overruns);
//   - a device that says it does not support the case (Device::supports) is reported `unsupported`, never
//     as a pass; a supported case whose run returns an error is a failure.
//
// Cases are plain data (conformance_cases()); `slow` marks the large ones (long contexts, big batches)
// that the default test run leaves to the `slow`-labelled test and `tessera matrix`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/rng.h"
#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::conformance {

// Allocates a case's tensors on one device, with reproducible contents.
class CaseEnv {
 public:
  CaseEnv(Device& device, Stream& stream, uint64_t seed);
  ~CaseEnv();

  // Uniform values in [-scale, scale), stored as `dtype` (f32, f16, bf16, q8_0, q4_0).
  Tensor random(DType dtype, std::initializer_list<int64_t> shape, float scale = 1.0f);
  Tensor values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<float>& v);
  Tensor ints(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v);
  // A weight matrix (or stack of them) as the engine uploads it: random like random(), alone in its buffer, then
  // handed to Device::prepare_matmul_weight (the cpu device may re-lay it into panels).
  Tensor weight(DType dtype, std::initializer_list<int64_t> shape, float scale = 1.0f);
  // An output: random initial contents, surrounded by guard bytes that the harness checks afterwards.
  // Also for tensors updated in place (rope's q and k, kv_write's caches, add_rms_norm's residual).
  Tensor output(DType dtype, std::initializer_list<int64_t> shape, float scale = 1.0f);
  Rng& rng() { return rng_; }

  struct Guarded {
    Tensor tensor;
    size_t guard_bytes = 0;
  };
  const std::vector<Guarded>& outputs() const { return outputs_; }
  Status status() const { return status_; }

 private:
  Tensor place(DType dtype, std::initializer_list<int64_t> shape, const std::vector<uint8_t>& bytes, bool guarded);
  std::vector<uint8_t> encode(DType dtype, const std::vector<float>& v);

  Device& device_;
  Stream& stream_;
  Rng rng_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Guarded> outputs_;
  Status status_;
};

struct Case {
  std::string op;     // op_name()
  DType dtype;        // the interesting storage type: weights for matmul, the cache for kv/attention, else f32
  std::string shape;  // human-readable parameters, unique within (op, dtype)
  double max_nmse;    // bound on the normalised mean squared error
  bool slow = false;  // large: left out of the default test run
  std::function<Op(CaseEnv&)> build;
};

// Every case (>= 2000), in a fixed order.
std::vector<Case> conformance_cases();
// The mixture-of-experts cases (cases_moe.cc), part of conformance_cases().
void add_moe_cases(std::vector<Case>& cases);
// The encoder operators' cases (cases_encoder.cc), part of conformance_cases().
void add_encoder_cases(std::vector<Case>& cases);
// Qwen3.5's linear-attention operators and its partial rotary and sigmoid gate (cases_linear.cc).
void add_linear_attention_cases(std::vector<Case>& cases);

enum class Outcome { kPass, kFail, kUnsupported };
std::string_view outcome_name(Outcome o);  // "pass", "FAIL", "unsupported"

struct CaseResult {
  Outcome outcome = Outcome::kPass;
  double nmse = 0.0;
  std::string detail;  // why it failed or is unsupported
};

// Runs `c` on the reference device once and compares every device in `targets` with it.
std::vector<CaseResult> run_case(const Case& c, Device& reference, const std::vector<Device*>& targets);

}  // namespace tessera::ops::conformance
