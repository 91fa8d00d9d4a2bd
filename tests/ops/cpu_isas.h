// The cpu kernel builds the operator tests check: every one this processor runs natively and, where it has no tile
// unit, the amx kernels with their tiles in software (cpu::Isa::kAmxEmulated), so that the amx build's matmuls are
// checked on every host with AVX-512 and AVX512-BF16, not only on the few with AMX.
#pragma once

#include <vector>

#include "ops/cpu/cpu_backend.h"

namespace tessera::ops {

inline std::vector<cpu::Isa> cpu_isas_under_test() {
  std::vector<cpu::Isa> out = cpu::runnable_isas();
  if (!cpu::isa_supported(cpu::Isa::kAmx) && cpu::isa_supported(cpu::Isa::kAmxEmulated))
    out.insert(out.begin(), cpu::Isa::kAmxEmulated);
  return out;
}

}  // namespace tessera::ops
