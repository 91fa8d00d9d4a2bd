// The one file that knows which backends this binary was built with. Optional SDKs add their registration
// here under their CMake-defined macro, and nowhere else.
#include <mutex>

#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#include "ops/registry.h"

namespace tessera::ops {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    BackendRegistry& r = BackendRegistry::global();
    (void)r.add({"ref", "portable scalar C++; the numerical reference for every other backend",
                 [] { return ref::create_backend(); }});
    (void)r.add({"cpu", "host CPU: AVX2/FMA/F16C kernels (run-time dispatch), OpenBLAS, OpenMP threads",
                 [] { return cpu::create_backend(); }});
  });
}

}  // namespace tessera::ops
