// The cpu backend: the host processor, one device ("cpu:0"), operators run synchronously in Stream::run.
//
// Kernels come in builds of one source, chosen when the backend is created from what CPUID reports (the binary
// itself targets baseline x86-64): amx (the avx512 build plus AMX tiles for the matmuls, amx.h), avx512
// (AVX-512 F/BW/VL/DQ + VNNI, on top of AVX2), avx2 (AVX2/FMA/F16C) and generic (portable loops).
// `--cpu-isa` / TESSERA_CPU_ISA (auto|amx|avx512|avx2|generic) forces one; forcing a variant this processor (or
// its operating system) cannot run is an error, never a crash. One more variant is only ever chosen by name:
// amx-emulated, the amx build's kernels with each tile instruction carried out in software (amx_tiles.h), on any
// processor with the avx512 set and AVX512-BF16; many times slower than the tiles, it lets the tests run the amx
// kernels where there are none (a processor without AMX, such as AMD's). The device's name says which variant runs.
// Work is split over the stream's WorkerPool (DeviceOptions::threads, default: every processor). Weights: f32, f16,
// bf16 and every GGUF block type of base/quant.h (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k ... q6_k: integer dot products
// against activations quantised once per row to int8); q4_0, q5_0, q4_k, q6_k (and more, repack.h; for the amx and
// avx512 and avx2 kernels bf16 and f16) matrices are repacked into row panels when the engine uploads them
// (Device::prepare_matmul_weight, repack.h).
// KV cache: f32 or f16.
//
// Thread-safety: as backend.h. Each Stream runs its operators on the calling thread plus the OpenMP team.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::cpu {

enum class Isa {
  kAuto,         // TESSERA_CPU_ISA if set, else the widest kernels this processor runs
  kAmx,          // kAvx512 plus AMX-INT8 tiles (amx.h): quantised matmuls of many rows on the tile unit
  kAvx512,       // AVX-512 F/BW/VL/DQ + VNNI (and AVX2/FMA/F16C)
  kAvx2,         // AVX2/FMA/F16C
  kGeneric,      // the portable fallback (what a processor without AVX2 gets)
  kAmxEmulated,  // kAmx with its tile instructions in software: for tests, never chosen by kAuto
};

// Whether the variant runs the amx build's kernels (kAmx, kAmxEmulated): its weight layouts and arithmetic.
constexpr bool uses_tiles(Isa isa) { return isa == Isa::kAmx || isa == Isa::kAmxEmulated; }

// "auto", "amx", "avx512", "avx2", "generic", "amx-emulated"; InvalidArgument naming the accepted values otherwise.
Result<Isa> parse_isa(std::string_view name);
std::string_view isa_name(Isa isa);
// Whether this processor can run the variant (kAuto: always).
bool isa_supported(Isa isa);
// The variants this processor runs natively, widest first (for the conformance suite and the support matrix):
// never kAmxEmulated, which tests ask for by name (isa_supported).
std::vector<Isa> runnable_isas();

// kAuto resolves TESSERA_CPU_ISA, then the widest runnable variant. A forced variant this processor cannot
// run, or a bad TESSERA_CPU_ISA, is an error (FailedPrecondition / InvalidArgument).
Result<std::unique_ptr<Backend>> create_backend(Isa isa = Isa::kAuto);

// What kAuto picks here, with its instruction sets: "amx (avx512f/bw/vl/dq+vnni+amx-int8)",
// "avx512 (avx512f/bw/vl/dq+vnni)", "avx2 (avx2+fma+f16c)" or "generic"; TESSERA_CPU_ISA is honoured when valid.
std::string detected_isa();

// The libraries the backend runs on, for reports: "OpenMP 201511; GCC 12.2.0".
std::string runtime_versions();

}  // namespace tessera::ops::cpu
