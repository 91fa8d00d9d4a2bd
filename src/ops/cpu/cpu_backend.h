// The cpu backend: the host processor, one device ("cpu:0"), operators run synchronously in Stream::run.
//
// Matrix products and attention use AVX2/FMA/F16C kernels when the processor has them (checked at run
// time; the binary itself targets baseline x86-64) and portable loops otherwise; f32 products with many
// rows go to OpenBLAS; work is split over OpenMP threads (DeviceOptions::threads, default: every
// processor). Weights: f32, f16, bf16, q8_0, q4_0 (GGUF blocks). KV cache: f32 or f16.
//
// Thread-safety: as backend.h. Each Stream runs its operators on the calling thread plus the OpenMP team.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::cpu {

enum class Isa {
  kAuto,     // the widest kernels this processor runs
  kGeneric,  // the portable fallback only (what a processor without AVX2 gets); for tests
};

Result<std::unique_ptr<Backend>> create_backend(Isa isa = Isa::kAuto);

// "avx2+fma+f16c" or "generic": what kAuto picks on this processor.
const char* detected_isa();

// The libraries the backend runs on, for reports: "OpenBLAS 0.3.21 ...; OpenMP 201511; GCC 12.2.0".
std::string runtime_versions();

}  // namespace tessera::ops::cpu
