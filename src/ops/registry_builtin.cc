// The one file that knows which backends this binary was built with. Optional SDKs add their registration
// here under their CMake-defined macro, and nowhere else.
#include <mutex>

#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#include "ops/registry.h"

#if defined(TESSERA_HAVE_OPENCL)
#include "ops/opencl/opencl_backend.h"
#endif
#if defined(TESSERA_HAVE_VULKAN)
#include "ops/vulkan/vulkan_backend.h"
#endif
#if defined(TESSERA_HAVE_CUDA)
#include "ops/cuda/cuda_backend.h"
#endif

namespace tessera::ops {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    BackendRegistry& r = BackendRegistry::global();
    (void)r.add({"ref", "portable scalar C++; the numerical reference for every other backend",
                 [] { return ref::create_backend(); }});
    (void)r.add({"cpu",
                 "host CPU: AMX / AVX-512+VNNI / AVX2 / generic kernels (chosen from CPUID, --cpu-isa), "
                 "OpenMP threads",
                 [] { return cpu::create_backend(); }});
#if defined(TESSERA_HAVE_OPENCL)
    (void)r.add({"opencl", "OpenCL C kernels compiled by the platform's compiler (PoCL on CPUs), binary cache on disk",
                 [] { return opencl::create_backend(); }});
#endif
#if defined(TESSERA_HAVE_VULKAN)
    (void)r.add({"vulkan",
                 "GLSL compute shaders compiled to SPIR-V at build time; any Vulkan device (lavapipe on CPUs)",
                 [] { return vulkan::create_backend(); }});
#endif
#if defined(TESSERA_HAVE_CUDA)
    (void)r.add({"cuda", "CUDA kernels for NVIDIA GPUs (sm_90 + PTX)", [] { return cuda::create_backend(); }});
#endif
  });
}

}  // namespace tessera::ops
