// Hardware ceilings of the host, measured the way the kernels use the machine (same thread count, same
// vector width), for roofline comparisons in `tessera bench generate`:
//   read bandwidth  a STREAM-like pass that sums a large array (what decode does with weights);
//   triad bandwidth STREAM's a[i] = b[i] + s * c[i], bytes read and written;
//   FMA peak        independent 8-wide FMA chains on every thread (no memory traffic).
// Each is the best of a few repetitions, in bytes/s or flop/s (one FMA = 2 flops).
#pragma once

#include <cstddef>

namespace tessera::ops::cpu {

struct Ceilings {
  double read_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  double fma_flops_per_s = 0;
};

// `bytes`: size of each array (choose well above the last-level cache).
Ceilings measure_ceilings(int threads, size_t bytes = size_t{256} << 20);

}  // namespace tessera::ops::cpu
