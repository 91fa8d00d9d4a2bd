// Hardware ceilings of the host, measured the way the kernels use the machine (same thread count, same
// vector width), for roofline comparisons in `tessera bench generate`:
//   read bandwidth  a STREAM-like pass that sums a large array (what decode does with weights), plain and with the
//                   far L2 prefetch the k-quant decode uses on AMD, the faster of the two; the arrays are paged as
//                   the weights are (2 MiB aligned, transparent huge pages on request);
//   triad bandwidth STREAM's a[i] = b[i] + s * c[i], bytes read and written;
//   f32 FMA peak    independent FMA chains of the build's widest vector (avx512: 512-bit) on every thread;
//   int8 dot peak   independent integer dot-product chains: 512-bit VNNI vpdpbusd (avx512), maddubs + madd
//                   (avx2), none in the generic build: what the quantised matmuls' vector kernels run;
//   AMX int8 / bf16 tile products (tdpbssd, tdpbf16ps) into four independent accumulator tiles, where the
//                   processor and Linux allow tiles (amx.h).
// Compute loops run in registers only (no memory traffic), timed per thread, summed over threads. Each is the
// best of a few repetitions, in bytes/s or operations/s (one multiply-add = 2 operations, as flops count).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/dtype.h"

namespace tessera::ops::cpu {

struct Ceilings {
  double read_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  double fma_flops_per_s = 0;
  double int8_dot_ops_per_s = 0;        // 0: no integer dot-product kernels (generic build)
  double amx_int8_ops_per_s = 0;        // 0: no AMX here
  double amx_bf16_flops_per_s = 0;      // 0: no AMX here
  std::string fma_kind, int8_dot_kind;  // the instructions measured: "512-bit vfmadd", "512-bit vpdpbusd", ...
};

// Measured with the kernel build the cpu backend runs here (TESSERA_CPU_ISA honoured). `bytes`: size of each array
// (choose well above the last-level cache).
Ceilings measure_ceilings(int threads, size_t bytes = size_t{256} << 20);

// The compute ceiling of the cpu backend's matrix products for weights of type `matrices` on the kernel variant
// `variant` (detected_isa()'s text): the AMX int8 peak for block-quantised weights on the amx kernels, the int8
// dot peak on avx512 / avx2, the f32 FMA peak otherwise (dense weights, or a ceiling not measured here).
struct ComputeCeiling {
  double ops_per_s = 0;
  const char* what = "";  // "AMX int8", "int8 dot", "f32 FMA"
};
ComputeCeiling matmul_ceiling(const Ceilings& c, DType matrices, std::string_view variant);

}  // namespace tessera::ops::cpu
