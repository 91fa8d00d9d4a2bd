// AMX (Advanced Matrix Extensions) on this host: whether the processor has the tile instructions the cpu
// backend's amx kernels use, and whether Linux lets this process use them.
//
// Three things must hold before any tile instruction runs:
//   1. CPUID reports AMX-TILE, AMX-INT8 and AMX-BF16 (leaf 7: EDX bits 24, 25, 22) and AVX512-BF16 (leaf 7.1:
//      EAX bit 5; every processor with AMX has it); the backend also asks for the AVX-512 set of its avx512
//      kernels, which the amx build extends;
//   2. the OS manages the tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA);
//   3. the process asked Linux for the 8 KiB tile-data state: arch_prctl(ARCH_REQ_XCOMP_PERM,
//      XFEATURE_XTILEDATA). Without it the first tile load faults (SIGILL). The permission belongs to the whole
//      process: threads started before or after the request may use tiles (tests/ops/cpu_amx_test.cc checks a
//      worker thread that existed before it). It is requested once per process (std::call_once), the first time
//      anyone asks amx_status(), which the backend does before it creates a stream or a worker thread.
// Each thread still configures its tiles itself (ldtilecfg) before using them: tile configuration is per-thread
// register state, and the kernels load it per call and release it (tilerelease) when done.
//
// Thread-safe: every function may be called from any thread.
#pragma once

#include <string>

namespace tessera::ops::cpu {

struct AmxStatus {
  bool usable = false;  // all three conditions above hold
  std::string reason;   // why not, for error messages ("" when usable)
};

// Checks CPUID and XCR0 and, the first time, requests the tile permission; the answer never changes after.
const AmxStatus& amx_status();

// Whether CPUID reports the instruction sets of condition 1 (no permission is requested).
bool cpu_reports_amx();

}  // namespace tessera::ops::cpu
